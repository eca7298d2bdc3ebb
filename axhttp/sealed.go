package axhttp

import (
	"fmt"

	"github.com/axsched/ax"
)

// Jobs encrypted at rest (ax.Config.Keys): a server whose Scheduler has
// the key ring reads them plain (its Admin opens them); one without it
// reads the sealed envelopes, which the job page shows as "encrypted (key
// ID)" rather than as ciphertext. The JSON API and the raw values return
// the envelope as stored: {"ax_sealed":3,"key":ID,...}. A read-only
// caller gets the values given with ax.SecretMetadata sealed even from a
// server with the ring (Handler.reader, Admin.WithSecretMetadataSealed);
// payloads and results open for every caller. Only a whole envelope is
// shown as encrypted (ax.IsSealed): a plain value that merely looks like
// one is shown as it is.

// sealedShown returns what a page shows for a sealed value, and whether v
// is one.
func sealedShown[T []byte | string](v T) (shown, bool) {
	id := ax.SealedKeyID(v)
	if id == "" {
		return shown{}, false
	}
	return shown{Text: fmt.Sprintf("encrypted (key %s)", id)}, true
}

// markSealed replaces the sealed payload and result of a job view.
func markSealed(payload, result []byte, v *jobView) {
	if s, ok := sealedShown(payload); ok {
		v.Payload = s
	}
	if s, ok := sealedShown(result); ok {
		v.Result = s
	}
}

// metaValue is a metadata value as the job page shows it.
func metaValue(v string) shown {
	if s, ok := sealedShown(v); ok {
		return s
	}
	return boundedText(v, pageMetaValueBytes)
}
