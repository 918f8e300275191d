package train

import (
	"testing"
	"time"
)

// TestP2PPollOnlyWithCoresToSpare: in-process ranks poll their
// point-to-point waits only where their kernel threads do not outnumber
// the cores.
func TestP2PPollOnlyWithCoresToSpare(t *testing.T) {
	for _, c := range []struct {
		ranks, threads, cores int
		want                  time.Duration
	}{
		{2, 1, 2, 50 * time.Microsecond},
		{1, 2, 2, 50 * time.Microsecond},
		{4, 1, 8, 50 * time.Microsecond},
		{4, 1, 2, 0},
		{2, 2, 2, 0},
		{3, 1, 2, 0},
	} {
		if got := p2pPoll(c.ranks, c.threads, c.cores); got != c.want {
			t.Errorf("p2pPoll(ranks %d, threads %d, cores %d) = %v, want %v", c.ranks, c.threads, c.cores, got, c.want)
		}
	}
}
