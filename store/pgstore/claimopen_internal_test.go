package pgstore

import "testing"

// TestClaimSpareFor: the spare rows follow what the claims beside met,
// half as many again, and fall by a quarter a claim when they meet less.
func TestClaimSpareFor(t *testing.T) {
	cases := []struct {
		name                 string
		spare, skipped, lost int64
		want                 int64
	}{
		{"alone", 0, 0, 0, 0},
		{"stepped over", 0, 26, 0, 39},
		{"stepped over and lost", 0, 26, 25, 76},
		{"met more than read", 40, 75, 0, 112},
		{"met less", 112, 10, 0, 84},
		{"decays", 3, 0, 0, 2},
		{"decays to none", 1, 0, 0, 0},
		{"at most maxClaimSpare", 0, 5000, 0, maxClaimSpare},
		{"negatives count as none", 8, -1, -1, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := claimSpareFor(c.spare, c.skipped, c.lost); got != c.want {
				t.Errorf("claimSpareFor(%d, %d, %d) = %d, want %d", c.spare, c.skipped, c.lost, got, c.want)
			}
		})
	}
}
