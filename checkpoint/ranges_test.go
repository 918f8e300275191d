package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// boxStep writes a (6,4) "qkv" cut as tp=2 boxes, each box split in two
// ranges written by two ranks (ZeRO over dp=2), and returns the root.
func boxStep(t *testing.T) string {
	t.Helper()
	v := make([]float32, 24)
	for i := range v {
		v[i] = float32(i) + 0.25
	}
	s := newStore(t, 0)
	shards := qkvShards(t, v, 2)
	for r := 0; r < 2; r++ {
		second := shards[r][1]
		second.Name = "qkv"
		if err := s.WriteRank(1, r, 4, []Shard{shards[r][0]}); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteRank(1, 2+r, 4, []Shard{second}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Commit(Manifest{Step: 1, World: 4}); err != nil {
		t.Fatal(err)
	}
	return s.Config().Dir
}

// Every range [lo, hi) of every tensor, read shard by shard from the files
// (OpenRanges), equals that range of the tensor as Open assembles it: flat
// ranges over 3 ranks (F32, BF16, whole, empty) and tensor-parallel boxes.
func TestReadElemsMatchesOpen(t *testing.T) {
	for _, root := range []string{filepath.Dir(save(t, newStore(t, 0), 1, 3)), boxStep(t)} {
		full, err := Open(root)
		if err != nil {
			t.Fatal(err)
		}
		part, err := OpenRanges(root)
		if err != nil {
			t.Fatal(err)
		}
		if part.files == nil {
			t.Fatal("OpenRanges of a checkpoint with shard checksums read whole files")
		}
		for name, te := range full.Index().Tensors {
			want, err := full.ReadTensor(name)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := numel(te.Shape)
			size := int64(te.DType.Size())
			for lo := int64(0); lo <= n; lo++ {
				for hi := lo; hi <= n; hi++ {
					got, err := part.ReadElems(name, lo, hi)
					if err != nil {
						t.Fatalf("%s [%d, %d): %v", name, lo, hi, err)
					}
					if !bytes.Equal(got.Data, want.Data[lo*size:hi*size]) {
						t.Fatalf("%s [%d, %d): %v, want %v", name, lo, hi, got.Data, want.Data[lo*size:hi*size])
					}
				}
			}
		}
	}
}

// A corrupt byte is found by the read that covers it, naming the file and
// the tensor, while reads of other shards succeed; a truncated file is
// refused when opened; a checkpoint without shard checksums (older) is
// read as Open reads it.
func TestOpenRangesBadInput(t *testing.T) {
	dir := save(t, newStore(t, 0), 1, 3)
	c, err := OpenRanges(dir)
	if err != nil {
		t.Fatal(err)
	}
	rf := c.files[1]
	info := rf.at["wte"]
	b, _ := os.ReadFile(rf.path)
	b[rf.data+info.Begin] ^= 0x40
	if err := os.WriteFile(rf.path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = OpenRanges(dir)
	if err != nil {
		t.Fatalf("a flipped data byte is found when read, not at open: %v", err)
	}
	_, err = c.ReadTensor("wte")
	if err == nil || !strings.Contains(err.Error(), rf.path) || !strings.Contains(err.Error(), `"wte"`) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("corrupt wte on rank 1: %v", err)
	}
	if _, err := c.ReadTensor("adam.m"); err != nil {
		t.Errorf("an intact tensor of the same file: %v", err)
	}
	if _, err := c.ReadElems("wte", 0, int64(split32(1))); err != nil {
		t.Errorf("rank 0's range of the corrupt tensor: %v", err)
	}
	if err := os.WriteFile(rf.path, b[:len(b)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRanges(dir); err == nil || !strings.Contains(err.Error(), rf.path) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated rank 1: %v", err)
	}

	old := save(t, newStore(t, 0), 1, 2)
	ixPath := filepath.Join(old, IndexName)
	ix, _ := os.ReadFile(ixPath)
	c0, _ := Open(old)
	for _, te := range c0.Index().Tensors {
		for _, se := range te.Shards {
			ix = bytes.ReplaceAll(ix, []byte(`"sha256": "`+se.SHA256+`"`), nil)
		}
	}
	ix = bytes.ReplaceAll(ix, []byte(",\n          \n"), []byte("\n"))
	if err := os.WriteFile(ixPath, ix, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = OpenRanges(old)
	if err != nil || c.files != nil || c.Index().shardSums() {
		t.Fatalf("a checkpoint without shard checksums: %v (partial reads: %v)", err, c != nil && c.files != nil)
	}
	if sh, err := c.ReadTensor("wte"); err != nil || len(sh.Data) != 32*4 {
		t.Errorf("read of the older checkpoint: %v", err)
	}
}

// split32 is the end of rank 0's range of wte (32 elements over 3 ranks).
func split32(int) int { _, hi := split(32, 0, 3); return hi }

// Commit streams the rank files: committing two ranks of 8 MiB each
// allocates less than one of them (it holds no file in memory).
func TestCommitStreams(t *testing.T) {
	const n = 2 << 20 // elements per rank: 8 MiB
	s := newStore(t, 0)
	v := make([]float32, n)
	for r := 0; r < 2; r++ {
		if err := s.WriteRank(1, r, 2, []Shard{Float32Shard("w", []int{2 * n}, int64(r*n), v)}); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	dir, err := s.Commit(Manifest{Step: 1, World: 2})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Commit allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4*n {
		t.Errorf("Commit allocated %d bytes for rank files of %d", got, 4*n)
	}
	if _, err := Open(dir); err != nil {
		t.Fatalf("the streamed commit does not verify: %v", err)
	}
}

// Shards larger than one streaming chunk (readShardInto), boxes and
// ranges, read back by ReadElems over windows that start and end inside
// chunks and rows: every element where it belongs.
func TestReadElemsAcrossChunks(t *testing.T) {
	const rows, cols = 600, 1000 // each rank's box: 600×500 fp32 = 1.2 MB > chunkBytes
	n := rows * cols
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i) + 0.5
	}
	s := newStore(t, 0)
	for r := 0; r < 2; r++ {
		sl := Slice{View: []int{rows, cols}, Off: []int{0, r * cols / 2}, Ext: []int{rows, cols / 2}}
		var box []float32
		sl.runs(0, int64(rows*cols/2), func(_, g, k int64) { box = append(box, v[g:g+k]...) })
		lo, hi := r*n/2, (r+1)*n/2
		sh := []Shard{SliceShard("box", []int{rows, cols}, sl, 0, box), Float32Shard("flat", []int{n}, int64(lo), v[lo:hi])}
		if err := s.WriteRank(1, r, 2, sh); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Commit(Manifest{Step: 1, World: 2}); err != nil {
		t.Fatal(err)
	}
	c, err := OpenRanges(s.Config().Dir)
	if err != nil {
		t.Fatal(err)
	}
	chunk := int64(chunkBytes / 4)
	for _, name := range []string{"box", "flat"} {
		for _, w := range [][2]int64{{0, int64(n)}, {chunk - 3, chunk + 5}, {1, 2*chunk + 7}, {int64(n)/2 - 11, int64(n)/2 + chunk + 13}, {int64(n) - 1, int64(n)}} {
			sh, err := c.ReadElems(name, w[0], w[1])
			if err != nil {
				t.Fatal(err)
			}
			got, _ := sh.Float32()
			if !equalF32(got, v[w[0]:w[1]]) {
				t.Errorf("%s [%d, %d): elements misplaced", name, w[0], w[1])
			}
		}
	}
}
