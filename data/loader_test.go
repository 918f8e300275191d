package data

import (
	"fmt"
	"testing"
)

func TestPermutationIsBijection(t *testing.T) {
	for _, n := range []uint64{1, 2, 3, 4, 5, 7, 16, 17, 100, 255, 256, 257, 1000, 4099} {
		for epoch := uint64(0); epoch < 3; epoch++ {
			p := newPermutation(n, 42, epoch)
			seen := make([]bool, n)
			for i := uint64(0); i < n; i++ {
				j := p.at(i)
				if j >= n || seen[j] {
					t.Fatalf("n=%d epoch=%d: at(%d)=%d repeats or is out of range", n, epoch, i, j)
				}
				seen[j] = true
			}
		}
	}
}

func TestPermutationShuffles(t *testing.T) {
	const n = 1000
	a, b, c := newPermutation(n, 1, 0), newPermutation(n, 1, 1), newPermutation(n, 2, 0)
	var fixed, sameEpoch, sameSeed int
	for i := uint64(0); i < n; i++ {
		if a.at(i) == i {
			fixed++
		}
		if a.at(i) == b.at(i) {
			sameEpoch++
		}
		if a.at(i) == c.at(i) {
			sameSeed++
		}
	}
	// A random permutation has about one fixed point and agrees with another
	// at about one place; allow plenty of slack.
	if fixed > 10 || sameEpoch > 10 || sameSeed > 10 {
		t.Fatalf("not shuffled: %d fixed points, %d agreements across epochs, %d across seeds", fixed, sameEpoch, sameSeed)
	}
}

// countingLoader serves a store whose token i is i, so every window's start
// can be read off its first input.
func countingLoader(t *testing.T, n, seqLen int, valFraction float64, seed uint64) *Loader {
	t.Helper()
	s := make(u16Store, n)
	for i := range s {
		s[i] = uint16(i)
	}
	tok, _ := NewTokenizer("byte")
	l, err := newLoader(s, tok, LoaderConfig{Data: Config{Source: "counting", ValFraction: valFraction}, SeqLen: seqLen, Vocab: 1 << 16, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBatchShapesAndEpochs(t *testing.T) {
	cases := []struct {
		n, T int
		f    float64
	}{
		{1000, 16, 0.1},
		{1000, 7, 0},
		{40, 16, 0}, // between 2T and 3T tokens: one window, shifts up to T-1
		{20, 16, 0}, // fewer than 2T: one window, shift up to n-1-T
		{17, 16, 0}, // exactly T+1: one window, no shift
		{5000, 64, 0.5},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("n%d-T%d-f%g", tc.n, tc.T, tc.f), func(t *testing.T) {
			l := countingLoader(t, tc.n, tc.T, tc.f, 9)
			N := l.TrainSamples()
			T := int64(tc.T)
			for epoch := int64(0); epoch < 3; epoch++ {
				in, tg := make([]int32, N*T), make([]int32, N*T)
				if err := l.Batch(epoch*N, int(N), in, tg); err != nil {
					t.Fatal(err)
				}
				shift := int64(in[0]) % T
				seen := map[int64]bool{}
				for i := int64(0); i < N; i++ {
					start := int64(in[i*T])
					for j := int64(0); j < T; j++ {
						if int64(in[i*T+j]) != start+j || int64(tg[i*T+j]) != start+j+1 {
							t.Fatalf("sample %d: inputs/targets are not consecutive tokens from %d", i, start)
						}
					}
					if (start-shift)%T != 0 || seen[start] {
						t.Fatalf("epoch %d: window start %d (shift %d) is misaligned or repeated", epoch, start, shift)
					}
					seen[start] = true
					if start+T >= l.TrainTokens() {
						t.Fatalf("window [%d,%d] reads past the training split (%d tokens)", start, start+T, l.TrainTokens())
					}
				}
			}
		})
	}
}

func TestBatchIsPureFunctionOfSample(t *testing.T) {
	l := countingLoader(t, 3000, 10, 0.1, 5)
	T := 10
	all, allT := make([]int32, 40*T), make([]int32, 40*T)
	if err := l.Batch(100, 40, all, allT); err != nil {
		t.Fatal(err)
	}
	// The same samples fetched one by one, in reverse, by a second loader
	// built from the same seed.
	l2 := countingLoader(t, 3000, 10, 0.1, 5)
	one, oneT := make([]int32, T), make([]int32, T)
	for i := 39; i >= 0; i-- {
		if err := l2.Batch(int64(100+i), 1, one, oneT); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < T; j++ {
			if one[j] != all[i*T+j] || oneT[j] != allT[i*T+j] {
				t.Fatalf("sample %d differs when fetched alone", 100+i)
			}
		}
	}
	// Another seed gives another order.
	l3 := countingLoader(t, 3000, 10, 0.1, 6)
	other, otherT := make([]int32, 40*T), make([]int32, 40*T)
	if err := l3.Batch(100, 40, other, otherT); err != nil {
		t.Fatal(err)
	}
	same := 0
	for i := 0; i < 40; i++ {
		if other[i*T] == all[i*T] {
			same++
		}
	}
	if same > 5 {
		t.Fatalf("seeds 5 and 6 agree on %d of 40 samples", same)
	}
}

func TestValidationSplit(t *testing.T) {
	l := countingLoader(t, 1000, 16, 0.1, 1)
	if l.TrainTokens() != 900 || l.ValTokens() != 100 {
		t.Fatalf("split %d/%d, want 900/100", l.TrainTokens(), l.ValTokens())
	}
	if l.ValSamples() != 6 { // ⌊99/16⌋
		t.Fatalf("ValSamples = %d, want 6", l.ValSamples())
	}
	in, tg := make([]int32, 8*16), make([]int32, 8*16)
	if err := l.ValBatch(0, 8, in, tg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		want := int32(900 + 16*(i%6)) // in order from the split's start, wrapping
		if in[i*16] != want || tg[i*16+15] != want+16 {
			t.Fatalf("val sample %d starts at %d, want %d", i, in[i*16], want)
		}
	}
	noVal := countingLoader(t, 1000, 16, 0, 1)
	if err := noVal.ValBatch(0, 1, in, tg); err == nil {
		t.Fatal("ValBatch without a validation split succeeded")
	}
}

func TestSplitTooSmall(t *testing.T) {
	s := make(u16Store, 100)
	tok, _ := NewTokenizer("byte")
	cases := []struct {
		T    int
		f    float64
		want string
	}{
		{100, 0, "training split has 100 tokens, need at least seq_len+1=101"},
		{16, 0.1, "validation split (val_fraction=0.1) has 10 tokens"},
	}
	for _, tc := range cases {
		_, err := newLoader(s, tok, LoaderConfig{Data: Config{Source: "x.bin", ValFraction: tc.f}, SeqLen: tc.T, Vocab: 256})
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("T=%d f=%g: err = %v, want %q", tc.T, tc.f, err, tc.want)
		}
	}
}

func TestBatchArgumentErrors(t *testing.T) {
	l := countingLoader(t, 1000, 16, 0, 1)
	small := make([]int32, 16)
	if err := l.Batch(0, 2, small, small); err == nil {
		t.Error("Batch accepted too small buffers")
	}
	if err := l.Batch(-1, 1, small, small); err == nil {
		t.Error("Batch accepted a negative sample index")
	}
}

// A batch of token ranges (a context-parallel rank's share) holds Batch's
// and ValBatch's tokens at those positions, back to back; a range outside
// the sample is refused.
func TestBatchRanges(t *testing.T) {
	const T, n = 16, 3
	l := countingLoader(t, 2000, T, 0.2, 4)
	rs := [][2]int{{4, 8}, {8, 12}, {0, 2}}
	in, tgt := make([]int32, n*T), make([]int32, n*T)
	rin, rtgt := make([]int32, n*10), make([]int32, n*10)
	for _, val := range []bool{false, true} {
		var err1, err2 error
		if val {
			err1, err2 = l.ValBatch(5, n, in, tgt), l.ValBatchRanges(5, n, rs, rin, rtgt)
		} else {
			err1, err2 = l.Batch(5, n, in, tgt), l.BatchRanges(5, n, rs, rin, rtgt)
		}
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		at := 0
		for i := 0; i < n; i++ {
			for _, r := range rs {
				for p := r[0]; p < r[1]; p++ {
					if rin[at] != in[i*T+p] || rtgt[at] != tgt[i*T+p] {
						t.Fatalf("val=%v sample %d position %d: ranges give %d→%d, batch %d→%d", val, i, p, rin[at], rtgt[at], in[i*T+p], tgt[i*T+p])
					}
					at++
				}
			}
		}
	}
	if err := l.BatchRanges(0, 1, [][2]int{{10, 17}}, rin, rtgt); err == nil {
		t.Fatal("a range past the sample's end was accepted")
	}
}
