package data

import (
	"strings"
	"testing"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestDPSlicesCoverGlobalBatch: for every DP size and accumulation, the
// micro-batches of all ranks of one step are exactly the single-device
// global batch, and consecutive steps continue the order.
func TestDPSlicesCoverGlobalBatch(t *testing.T) {
	const T, G = 8, 24
	l := countingLoader(t, 5000, T, 0, 3)
	for _, sh := range []struct{ ranks, micro int }{{1, 24}, {1, 4}, {2, 12}, {2, 3}, {4, 2}, {3, 1}} {
		pos := Position{}
		for step := 0; step < 3; step++ {
			want, wantT := make([]int32, G*T), make([]int32, G*T)
			if err := l.Batch(int64(step*G), G, want, wantT); err != nil {
				t.Fatal(err)
			}
			got := make([]int32, 0, G*T)
			for r := 0; r < sh.ranks; r++ {
				s := Slice{GlobalBatch: G, MicroBatch: sh.micro, Rank: r, Ranks: sh.ranks}
				for k := 0; k < s.Accum(); k++ {
					s.Micro = k
					in, tg := make([]int32, sh.micro*T), make([]int32, sh.micro*T)
					if err := l.Micro(pos, s, in, tg); err != nil {
						t.Fatal(err)
					}
					got = append(got, in...)
				}
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("dp=%d B=%d step %d: token %d is %d, single device %d", sh.ranks, sh.micro, step, i, got[i], want[i])
				}
			}
			pos = pos.Advance(G)
		}
		if pos.Sample != 3*G {
			t.Fatalf("position after 3 steps = %d, want %d", pos.Sample, 3*G)
		}
	}
}

func TestSliceValidate(t *testing.T) {
	cases := []struct {
		s    Slice
		want string
	}{
		{Slice{GlobalBatch: 8, MicroBatch: 2, Rank: 1, Ranks: 2, Micro: 1}, ""},
		{Slice{GlobalBatch: 8, MicroBatch: 0, Ranks: 1}, "micro_batch=0"},
		{Slice{GlobalBatch: 8, MicroBatch: 2, Ranks: 0}, "dp=0"},
		{Slice{GlobalBatch: 6, MicroBatch: 2, Ranks: 2}, "global_batch=6"},
		{Slice{GlobalBatch: 8, MicroBatch: 2, Rank: 2, Ranks: 2}, "dp rank 2"},
		{Slice{GlobalBatch: 8, MicroBatch: 2, Ranks: 2, Micro: 2}, "micro-step 2"},
	}
	for _, tc := range cases {
		err := tc.s.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !contains(err.Error(), tc.want)) {
			t.Errorf("%+v: err = %v, want %q", tc.s, err, tc.want)
		}
	}
}

// TestResumeBitIdentical: batches read after restoring a saved Position
// equal those of an uninterrupted run.
func TestResumeBitIdentical(t *testing.T) {
	const T, G, B = 16, 8, 4
	cfg := LoaderConfig{Data: Config{Source: SourceEmbedded, Tokenizer: "byte", ValFraction: 0.1}, SeqLen: T, Vocab: 256, Seed: 77}
	run := func(l *Loader, pos Position, steps int) ([]int32, Position) {
		var out []int32
		for s := 0; s < steps; s++ {
			for k := 0; k < G/B; k++ {
				in, tg := make([]int32, B*T), make([]int32, B*T)
				if err := l.Micro(pos, Slice{GlobalBatch: G, MicroBatch: B, Ranks: 1, Micro: k}, in, tg); err != nil {
					t.Fatal(err)
				}
				out = append(append(out, in...), tg...)
			}
			pos = pos.Advance(G)
		}
		return out, pos
	}
	l1, err := NewLoader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	straight, _ := run(l1, Position{}, 10)
	first, saved := run(l1, Position{}, 5)
	l2, err := NewLoader(cfg) // a fresh process would build a new loader
	if err != nil {
		t.Fatal(err)
	}
	second, _ := run(l2, saved, 5)
	resumed := append(first, second...)
	for i := range straight {
		if straight[i] != resumed[i] {
			t.Fatalf("token %d: straight %d, resumed %d", i, straight[i], resumed[i])
		}
	}
}

// TestConcurrentRanks: DP ranks running as goroutines share one Loader and
// read the same batches as one goroutine does.
func TestConcurrentRanks(t *testing.T) {
	const T, G, R = 8, 16, 4
	l := countingLoader(t, 4000, T, 0.1, 11)
	want := make([]int32, G*T)
	if err := l.Batch(G, G, want, make([]int32, G*T)); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, G*T)
	errs := make(chan error, R)
	for r := 0; r < R; r++ {
		go func() {
			s := Slice{GlobalBatch: G, MicroBatch: G / R, Rank: r, Ranks: R}
			lo := r * (G / R) * T
			errs <- l.Micro(Position{Sample: G}, s, got[lo:lo+(G/R)*T], make([]int32, (G/R)*T))
		}()
	}
	for r := 0; r < R; r++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("token %d: concurrent %d, serial %d", i, got[i], want[i])
		}
	}
}
