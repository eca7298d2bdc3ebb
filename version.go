package ax

// Version is this release of AX (semantic versioning). From v1.0.0 on,
// every later v1 release keeps the API and behaviour that
// docs/compatibility.md promises; CHANGELOG.md lists each release's
// changes and names its commit.
const Version = "1.0.0"
