package checkpoint

import (
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"

	"trellis/safetensors"
)

// global returns the full values of test tensor name at step: distinct per
// element, tensor and step, so any misplaced range shows.
func global(name string, n int, step int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(step)*1000 + float32(len(name))*10 + float32(i)*0.5
	}
	return v
}

// split gives rank r's [lo, hi) of n elements over world ranks, the larger
// pieces first (uneven on purpose).
func split(n, r, world int) (int, int) {
	q, rem := n/world, n%world
	lo := r*q + min(r, rem)
	hi := lo + q
	if r < rem {
		hi++
	}
	return lo, hi
}

// rankShards is what rank r of world saves at step: a matrix and an Adam
// moment split by element range, a bias and an empty tensor whole on rank 0,
// a bf16 copy split too.
func rankShards(t *testing.T, step, r, world int) []Shard {
	t.Helper()
	var out []Shard
	for _, spec := range []struct {
		name  string
		shape []int
	}{{"wte", []int{8, 4}}, {"adam.m", []int{11}}} {
		n := spec.shape[0]
		if len(spec.shape) > 1 {
			n *= spec.shape[1]
		}
		lo, hi := split(n, r, world)
		if lo < hi {
			out = append(out, Float32Shard(spec.name, spec.shape, int64(lo), global(spec.name, n, step)[lo:hi]))
		}
	}
	lo, hi := split(6, r, world)
	if lo < hi {
		b, err := safetensors.EncodeFloat32(safetensors.BF16, global("bf", 6, step)[lo:hi])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Shard{Name: "bf", Shape: []int{2, 3}, Lo: int64(lo), Hi: int64(hi), DType: safetensors.BF16, Data: b})
	}
	if r == 0 {
		out = append(out, Whole("ln.bias", []int{4}, global("ln.bias", 4, step)),
			Shard{Name: "empty", Shape: []int{0, 3}, DType: safetensors.I64})
	}
	return out
}

type trainerState struct {
	Step     int    `json:"step"`
	Seed     uint64 `json:"seed"`
	Position int64  `json:"position"`
}

// save writes step from world concurrent ranks (the WaitGroup is the
// barrier) and commits it.
func save(t *testing.T, s *Store, step, world int) string {
	t.Helper()
	writeRanks(t, s, step, world, world)
	meta, _ := json.Marshal(trainerState{Step: step, Seed: 42, Position: int64(step) * 256})
	dir, err := s.Commit(Manifest{Step: step, World: world, Plan: fmt.Sprintf("dp=%d", world), Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeRanks writes the files of ranks [0, upto) of world concurrently.
func writeRanks(t *testing.T, s *Store, step, world, upto int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, upto)
	for r := 0; r < upto; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = s.WriteRank(step, r, world, rankShards(t, step, r, world))
		}(r)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func newStore(t *testing.T, keep int) *Store {
	t.Helper()
	s, err := New(Config{Dir: t.TempDir() + "/run", Every: 1, Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func bf16Round(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		b, _ := safetensors.EncodeFloat32(safetensors.BF16, []float32{x})
		f, _ := safetensors.DecodeFloat32(safetensors.BF16, b)
		out[i] = f[0]
	}
	return out
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
