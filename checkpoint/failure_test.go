package checkpoint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"trellis/safetensors"
)

func TestCorruption(t *testing.T) {
	rank1 := RankFileName(1, 4)
	cases := []struct {
		name   string
		damage func(t *testing.T, root, dir string)
		want   string // after the step directory
	}{
		{"flipped byte", func(t *testing.T, root, dir string) {
			p := filepath.Join(dir, rank1)
			b, _ := os.ReadFile(p)
			b[len(b)-3] ^= 0x10
			os.WriteFile(p, b, 0o644)
		}, rank1 + ": checksum mismatch"},
		{"truncated", func(t *testing.T, root, dir string) {
			p := filepath.Join(dir, rank1)
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-4)
		}, rank1 + ": size "},
		{"missing file", func(t *testing.T, root, dir string) {
			os.Remove(filepath.Join(dir, rank1))
		}, rank1 + ": missing"},
		{"bad index json", func(t *testing.T, root, dir string) {
			os.WriteFile(filepath.Join(dir, IndexName), []byte(`{"version": 1, "step": `), 0o644)
		}, IndexName + ": "},
		{"index from the future", func(t *testing.T, root, dir string) {
			os.WriteFile(filepath.Join(dir, IndexName), []byte(`{"version": 9}`), 0o644)
		}, IndexName + ": format version 9"},
		{"index with a hole", func(t *testing.T, root, dir string) {
			editIndex(t, dir, func(ix *Index) { e := ix.Tensors["wte"]; e.Shards = e.Shards[1:]; ix.Tensors["wte"] = e })
		}, IndexName + `: tensor "wte": no rank holds [0, 8)`},
		{"index names another step", func(t *testing.T, root, dir string) {
			editIndex(t, dir, func(ix *Index) { ix.Step = 11 })
		}, IndexName + ": holds step 11"},
		{"missing index", func(t *testing.T, root, dir string) {
			os.Remove(filepath.Join(dir, IndexName))
		}, "step-00000010/index.json: no such file"},
		{"latest garbage", func(t *testing.T, root, dir string) {
			os.WriteFile(filepath.Join(root, LatestName), []byte("../../etc\n"), 0o644)
		}, `"../../etc" is not a step directory name`},
		{"latest to nothing", func(t *testing.T, root, dir string) {
			os.WriteFile(filepath.Join(root, LatestName), []byte("step-00000099\n"), 0o644)
		}, "step-00000099"},
	}
	for _, c := range cases {
		s := newStore(t, 0)
		dir := save(t, s, 10, 4)
		c.damage(t, s.Config().Dir, dir)
		_, err := Open(s.Config().Dir)
		if err == nil || !strings.HasPrefix(err.Error(), "checkpoint: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("Open of a missing path succeeded")
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a checkpoint") {
		t.Errorf("Open of an empty directory: %v", err)
	}
}

// editIndex rewrites a committed index.json through f.
func editIndex(t *testing.T, dir string, f func(*Index)) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, IndexName))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := DecodeIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	f(ix)
	out, _ := json.Marshal(ix)
	os.WriteFile(filepath.Join(dir, IndexName), out, 0o644)
}

// TestChangedAfterOpen: Open reads every file once, so damage done after
// it is never seen by the reads (and a fresh Open catches it).
func TestChangedAfterOpen(t *testing.T) {
	s := newStore(t, 0)
	dir := save(t, s, 2, 2)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.ReadRank(0)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, RankFileName(0, 2))
	b, _ := os.ReadFile(p)
	b[len(b)-1] ^= 1
	os.WriteFile(p, b, 0o644)
	after, err := c.ReadRank(0)
	if err != nil || len(after) != len(before) || !bytes.Equal(after[len(after)-1].Data, before[len(before)-1].Data) {
		t.Errorf("ReadRank after damage: %v (the verified bytes should be served)", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("Open after damage: %v", err)
	}
	if _, err := c.ReadRank(2); err == nil {
		t.Error("ReadRank(2) of world 2 succeeded")
	}
}

func TestCrashLeavesEarlierCheckpoint(t *testing.T) {
	s := newStore(t, 0)
	root := s.Config().Dir
	save(t, s, 10, 4)
	// Step 20: rank 3 dies before writing; nobody commits.
	writeRanks(t, s, 20, 4, 3)
	c, err := Open(root)
	if err != nil || c.Step() != 10 {
		t.Fatalf("after a crash: step %v, %v; want step 10", c, err)
	}
	// A commit attempted anyway fails naming the missing file and changes nothing.
	_, err = s.Commit(Manifest{Step: 20, World: 4})
	if err == nil || !strings.Contains(err.Error(), filepath.Join("step-00000020.partial", RankFileName(3, 4))) {
		t.Errorf("commit with a missing rank: %v", err)
	}
	if _, err := os.Stat(s.StepDir(20)); !os.IsNotExist(err) {
		t.Error("a final step-00000020 exists after a failed commit")
	}
	if c, err := Open(root); err != nil || c.Step() != 10 {
		t.Errorf("latest moved: %v", err)
	}
	// Debris in the next step's partial: a temp file and an older attempt's files.
	writeRanks(t, s, 30, 2, 2)
	os.WriteFile(filepath.Join(s.StepDir(30)+partialSuffix, ".rank-00000-of-00004.safetensors.tmp123"), []byte("x"), 0o644)
	save(t, s, 30, 4)
	if _, err := os.Stat(s.StepDir(20) + partialSuffix); !os.IsNotExist(err) {
		t.Error("the stale step-00000020.partial survived the next commit")
	}
	got := listDir(t, s.StepDir(30))
	want := []string{IndexName, RankFileName(0, 4), RankFileName(1, 4), RankFileName(2, 4), RankFileName(3, 4)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("step-00000030 holds %v, want %v", got, want)
	}
	if c, err := Open(root); err != nil || c.Step() != 30 {
		t.Errorf("after the next commit: %v", err)
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// TestCrashWhileReplacing simulates a crash inside publish, after the old
// copy of a step was moved aside and before the new one took its name.
func TestCrashWhileReplacing(t *testing.T) {
	s := newStore(t, 0)
	dir := save(t, s, 5, 2)
	if err := os.Rename(dir, dir+replacedSuffix); err != nil {
		t.Fatal(err)
	}
	c, err := Open(s.Config().Dir)
	if err != nil || c.Step() != 5 {
		t.Fatalf("Open after a crash mid-replace: %v", err)
	}
	save(t, s, 5, 2)
	if got := listDir(t, s.Config().Dir); !reflect.DeepEqual(got, []string{LatestName, "step-00000005"}) {
		t.Errorf("after the next commit: %v", got)
	}
}

func TestKeepAndReplace(t *testing.T) {
	s := newStore(t, 2)
	for step := 1; step <= 5; step++ {
		save(t, s, step, 1)
	}
	if got, want := listDir(t, s.Config().Dir), []string{LatestName, "step-00000004", "step-00000005"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Keep=2 left %v, want %v", got, want)
	}
	// Saving step 5 again replaces it.
	if err := s.WriteRank(5, 0, 1, []Shard{Whole("x", []int{1}, []float32{7})}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(Manifest{Step: 5, World: 1}); err != nil {
		t.Fatal(err)
	}
	c, err := Open(s.Config().Dir)
	if err != nil {
		t.Fatal(err)
	}
	if x, err := c.ReadTensor("x"); err != nil || len(c.Index().Tensors) != 1 || len(x.Data) != 4 {
		t.Errorf("replaced step 5: %v, %v", c.Index().Tensors, err)
	}
	if got := listDir(t, s.Config().Dir); len(got) != 3 {
		t.Errorf("after replacing: %v", got)
	}
	all := newStore(t, 0)
	for step := 1; step <= 4; step++ {
		save(t, all, step, 1)
	}
	if got := listDir(t, all.Config().Dir); len(got) != 5 {
		t.Errorf("Keep=0 left %v", got)
	}
}

func TestWriteRankRejects(t *testing.T) {
	s := newStore(t, 0)
	ok := Whole("a", []int{2}, []float32{1, 2})
	cases := []struct {
		name              string
		step, rank, world int
		shards            []Shard
		want              string
	}{
		{"rank out of world", 1, 2, 2, nil, "want step >= 0 and 0 <= rank < world"},
		{"negative step", -1, 0, 1, nil, "want step >= 0"},
		{"duplicate", 1, 0, 1, []Shard{ok, ok}, `tensor "a" given twice`},
		{"empty name", 1, 0, 1, []Shard{Whole("", []int{1}, []float32{1})}, "empty name"},
		{"past the end", 1, 0, 1, []Shard{Float32Shard("a", []int{2}, 1, []float32{1, 2})}, "range [1, 3) is not a non-empty part of [0, 2)"},
		{"empty range", 1, 0, 1, []Shard{Float32Shard("a", []int{2}, 1, nil)}, "range [1, 1)"},
		{"short data", 1, 0, 1, []Shard{{Name: "a", Shape: []int{2}, Hi: 2, DType: safetensors.F32, Data: make([]byte, 4)}}, "4 bytes of data"},
		{"dtype", 1, 0, 1, []Shard{{Name: "a", Shape: []int{1}, Hi: 1, DType: "F7", Data: make([]byte, 4)}}, `unknown dtype "F7"`},
		{"shape", 1, 0, 1, []Shard{{Name: "a", Shape: []int{-1}, DType: safetensors.U8}}, "invalid"},
	}
	for _, c := range cases {
		err := s.WriteRank(c.step, c.rank, c.world, c.shards)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestCommitRejects(t *testing.T) {
	cases := []struct {
		name   string
		shards [2][]Shard
		want   string
	}{
		{"overlap", [2][]Shard{{Float32Shard("a", []int{4}, 0, []float32{1, 2, 3})}, {Float32Shard("a", []int{4}, 2, []float32{3, 4})}}, "rank 1 holds [2, 4), overlapping"},
		{"gap", [2][]Shard{{Float32Shard("a", []int{4}, 0, []float32{1})}, {Float32Shard("a", []int{4}, 2, []float32{3, 4})}}, "no rank holds [1, 2)"},
		{"short", [2][]Shard{{Float32Shard("a", []int{4}, 0, []float32{1})}, nil}, "no rank holds [1, 4)"},
		{"shapes differ", [2][]Shard{{Float32Shard("a", []int{4}, 0, []float32{1, 2})}, {Float32Shard("a", []int{2, 2}, 2, []float32{3, 4})}}, `tensor "a" is F32 [2 2] here but F32 [4] on rank 0`},
	}
	for _, c := range cases {
		s := newStore(t, 0)
		for r := 0; r < 2; r++ {
			if err := s.WriteRank(7, r, 2, c.shards[r]); err != nil {
				t.Fatal(err)
			}
		}
		_, err := s.Commit(Manifest{Step: 7, World: 2})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
		if _, err := os.Stat(filepath.Join(s.Config().Dir, LatestName)); !os.IsNotExist(err) {
			t.Errorf("%s: latest written by a failed commit", c.name)
		}
	}
	s := newStore(t, 0)
	writeRanks(t, s, 1, 1, 1)
	if _, err := s.Commit(Manifest{Step: 1, World: 1, Meta: []byte("{bad")}); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("bad meta: %v", err)
	}
	if _, err := s.Commit(Manifest{Step: 1, World: 2}); err == nil || !strings.Contains(err.Error(), RankFileName(0, 2)) {
		t.Errorf("wrong world: %v", err)
	}
}

// FuzzDecodeIndex: arbitrary bytes never panic the decoder, and an accepted
// index survives encode and decode unchanged.
func FuzzDecodeIndex(f *testing.F) {
	s, err := New(Config{Dir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		lo, hi := split(5, r, 2)
		if err := s.WriteRank(1, r, 2, []Shard{Float32Shard("w", []int{5}, int64(lo), make([]float32, hi-lo))}); err != nil {
			f.Fatal(err)
		}
	}
	dir, err := s.Commit(Manifest{Step: 1, World: 2, Plan: "dp=2", Meta: []byte(`{"a":1}`)})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(filepath.Join(dir, IndexName))
	f.Add(good)
	f.Add([]byte(`{"version":1,"step":0,"world":1,"plan":"","tensors":{},"files":[]}`))
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := DecodeIndex(b)
		if err != nil {
			return
		}
		out, err := encodeIndex(ix)
		if err != nil {
			t.Fatalf("encoding an accepted index: %v", err)
		}
		again, err := DecodeIndex(out)
		if err != nil {
			t.Fatalf("re-decoding: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(normal(ix), normal(again)) {
			t.Fatalf("index changed:\n%+v\n%+v", ix, again)
		}
	})
}

// normal compacts Meta so that re-encoding whitespace does not count.
func normal(ix *Index) Index {
	c := *ix
	if c.Meta != nil {
		var b strings.Builder
		json.NewEncoder(&b).Encode(c.Meta)
		c.Meta = json.RawMessage(b.String())
	}
	return c
}
