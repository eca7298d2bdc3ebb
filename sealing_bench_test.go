package ax

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// BenchmarkSeal and BenchmarkOpen measure one 1 KB payload, the figures
// behind axbench throughput -encrypt's CPU per job.
func BenchmarkSeal(b *testing.B) {
	k, _ := GenerateKey("k1")
	ring, _ := NewKeyRing(k)
	plain := []byte(`{"body":"` + strings.Repeat("x", 1012) + `"}`)
	id := uuid.Must(uuid.NewV7())
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		if _, err := ring.seal(plain, partPayload, bindJob, string(id[:])); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	k, _ := GenerateKey("k1")
	ring, _ := NewKeyRing(k)
	plain := []byte(`{"body":"` + strings.Repeat("x", 1012) + `"}`)
	id := uuid.Must(uuid.NewV7())
	sealed, _ := ring.seal(plain, partPayload, bindJob, string(id[:]))
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		if _, err := ring.open(sealed, partPayload, sealRefs{job: id}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeBaseline decodes the same 1 KB payload into a struct, as
// Handle does for every job: a yardstick run beside Seal and Open, since
// on a loaded machine only their ratio means something.
func BenchmarkDecodeBaseline(b *testing.B) {
	plain := []byte(`{"body":"` + strings.Repeat("x", 1012) + `"}`)
	var v struct{ Body string }
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		if err := json.Unmarshal(plain, &v); err != nil {
			b.Fatal(err)
		}
	}
}
