package ax

// Version is this release of AX (semantic versioning). Before v1.0.0 a
// minor release may change the API; see the compatibility promise in the
// README and CHANGELOG.md.
const Version = "0.1.0"
