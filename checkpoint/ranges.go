package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"trellis/safetensors"
)

// Partial reads. A checkpoint whose index records a SHA-256 per shard
// (ShardEntry.SHA256; every checkpoint this build writes) can be opened
// with OpenRanges: index.json, the size of every rank file and its
// safetensors header are checked at once, and the data is read later,
// shard by shard, only for the shards a reader asks for (ReadElems), each
// verified against its checksum when read. A resuming rank so reads the
// byte ranges of the shards that overlap what its new layout holds, not
// every rank's files. Checkpoints without per-shard checksums (written
// before they existed) are opened as Open does: whole files, verified
// against their per-file SHA-256.

// readers bounds the shard reads one ReadElems runs at once.
const readers = 8

// rankFile locates the shards of one rank file for partial reads.
type rankFile struct {
	path string
	data int64 // offset of the safetensors data section
	at   map[string]safetensors.Info
}

// OpenRanges opens a step directory (or a root's latest) for partial
// reads; see the comment above. It checks everything but the data: the
// index, the step, each file's existence, size and header against the
// index.
func OpenRanges(path string) (*Checkpoint, error) {
	dir, indexPath, ix, err := readIndex(path)
	if err != nil {
		return nil, err
	}
	if !ix.shardSums() {
		return Open(dir)
	}
	c := &Checkpoint{dir: dir, ix: ix}
	var files int64
	for _, fe := range ix.Files {
		rf, err := openRankFile(dir, fe, ix)
		if err != nil {
			return nil, err
		}
		c.files = append(c.files, rf)
		files += fe.Size
	}
	if ix.dataBytes() > files {
		return nil, fmt.Errorf("checkpoint: %s: its tensors need %d bytes, its files hold %d", indexPath, ix.dataBytes(), files)
	}
	if err := ix.checkBoxes(); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", indexPath, err)
	}
	return c, nil
}

// shardSums reports whether every shard has its own checksum.
func (ix *Index) shardSums() bool {
	for _, t := range ix.Tensors {
		for _, s := range t.Shards {
			if s.SHA256 == "" {
				return false
			}
		}
	}
	return true
}

// openRankFile checks a rank file's size and reads and checks its header.
func openRankFile(dir string, fe FileEntry, ix *Index) (rankFile, error) {
	path := filepath.Join(dir, fe.Name)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rankFile{}, fmt.Errorf("checkpoint: %s: missing", path)
	}
	if err != nil {
		return rankFile{}, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return rankFile{}, fmt.Errorf("checkpoint: %w", err)
	}
	if st.Size() != fe.Size {
		return rankFile{}, fmt.Errorf("checkpoint: %s: size %d bytes, %s says %d (truncated or replaced)", path, st.Size(), IndexName, fe.Size)
	}
	head, err := readHeader(f, fe.Size)
	if err != nil {
		return rankFile{}, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	h, data, err := safetensors.ParseHeader(head, fe.Size)
	if err != nil {
		return rankFile{}, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	rf := rankFile{path: path, data: data, at: make(map[string]safetensors.Info, len(h.Tensors))}
	for _, t := range h.Tensors {
		rf.at[t.Name] = t
	}
	if err := rf.check(h, ix, fe.Rank); err != nil {
		return rankFile{}, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return rf, nil
}

// readHeader reads the 8-byte length prefix and the JSON header.
func readHeader(f io.ReaderAt, size int64) ([]byte, error) {
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err != nil {
		return nil, fmt.Errorf("header length: %w", err)
	}
	hl := int64(n[0]) | int64(n[1])<<8 | int64(n[2])<<16 | int64(n[3])<<24 | int64(n[4])<<32 | int64(n[5])<<40 | int64(n[6])<<48 | int64(n[7])<<56
	if hl < 0 || hl > safetensors.MaxHeaderSize || hl > size-8 {
		return nil, fmt.Errorf("header length %d does not fit the %d-byte file", hl, size)
	}
	b := make([]byte, 8+hl)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	return b, nil
}

// check compares a rank file's header and per-file record with the index:
// the same step, rank and world, and every shard the index places on this
// rank stored with its dtype, element count and place in the tensor.
func (rf rankFile) check(h *safetensors.Header, ix *Index, rank int) error {
	var fm fileMeta
	raw, ok := h.Metadata[metaKey]
	if !ok {
		return fmt.Errorf("no %q metadata: not a checkpoint rank file", metaKey)
	}
	if err := json.Unmarshal([]byte(raw), &fm); err != nil {
		return fmt.Errorf("metadata %q: %w", metaKey, err)
	}
	if fm.Version != Version || fm.Step != ix.Step || fm.Rank != rank || fm.World != ix.World {
		return fmt.Errorf("holds version %d step %d rank %d of %d, want version %d step %d rank %d of %d",
			fm.Version, fm.Step, fm.Rank, fm.World, Version, ix.Step, rank, ix.World)
	}
	for name, t := range ix.Tensors {
		for _, se := range t.Shards {
			if se.Rank != rank {
				continue
			}
			info, ok := rf.at[name]
			m, rec := fm.Shards[name]
			switch {
			case !ok || !rec:
				return fmt.Errorf("no tensor %q, which %s places here", name, IndexName)
			case info.DType != t.DType || info.Numel() != se.Hi-se.Lo || info.End-info.Begin != (se.Hi-se.Lo)*int64(t.DType.Size()):
				return fmt.Errorf("tensor %q is %s %v, %s says %s [%d, %d)", name, info.DType, info.Shape, IndexName, t.DType, se.Lo, se.Hi)
			case m.Lo != se.Lo || m.Hi != se.Hi || !sameSlice(m.Slice, se.Slice) || !slices.Equal(m.Shape, t.Shape):
				return fmt.Errorf("tensor %q: the file's record [%d, %d) of %v differs from %s's", name, m.Lo, m.Hi, m.Shape, IndexName)
			}
		}
	}
	return nil
}

// readShard reads one shard's bytes from its rank file and verifies them.
func (c *Checkpoint) readShard(name string, t TensorEntry, se ShardEntry) (Shard, error) {
	rf := c.files[se.Rank]
	info := rf.at[name] // present: checked by OpenRanges
	f, err := os.Open(rf.path)
	if err != nil {
		return Shard{}, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	b := make([]byte, info.End-info.Begin)
	if _, err := f.ReadAt(b, rf.data+info.Begin); err != nil {
		return Shard{}, fmt.Errorf("checkpoint: %s: tensor %q: %w (truncated?)", rf.path, name, err)
	}
	if sha256Hex(b) != se.SHA256 {
		return Shard{}, fmt.Errorf("checkpoint: %s: tensor %q [%d, %d): checksum mismatch (the file is corrupt)", rf.path, name, se.Lo, se.Hi)
	}
	return Shard{Name: name, Shape: t.Shape, Slice: se.Slice, Lo: se.Lo, Hi: se.Hi, DType: t.DType, Data: b}, nil
}

// ReadElems returns the elements [lo, hi) of the flattening of the named
// global tensor, reading only the shards that hold some of them (in
// parallel, each verified when the checkpoint was opened with OpenRanges).
func (c *Checkpoint) ReadElems(name string, lo, hi int64) (Shard, error) {
	t, ok := c.ix.Tensors[name]
	if !ok {
		return Shard{}, fmt.Errorf("checkpoint: %s: no tensor %q", c.dir, name)
	}
	n, _ := numel(t.Shape) // validated by DecodeIndex
	if lo < 0 || hi > n || lo > hi {
		return Shard{}, fmt.Errorf("checkpoint: %s: elements [%d, %d) of %q, which has %d", c.dir, lo, hi, name, n)
	}
	size := int64(t.DType.Size())
	out := Shard{Name: name, Shape: append([]int{}, t.Shape...), Lo: lo, Hi: hi, DType: t.DType, Data: make([]byte, (hi-lo)*size)}
	var need []ShardEntry
	for _, se := range t.Shards {
		if overlaps(se, lo, hi) {
			need = append(need, se)
		}
	}
	errs := make([]error, len(need))
	sem := make(chan struct{}, readers)
	var wg sync.WaitGroup
	for i, se := range need {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if c.files != nil {
				errs[i] = c.readShardInto(name, t, se, out.Data, lo, hi)
				return
			}
			s, err := c.shard(name, t, se)
			if err != nil {
				errs[i] = err
				return
			}
			place(out.Data, lo, hi, size, s, s.Lo, s.Data)
		}()
	}
	wg.Wait()
	if err := firstErr(errs); err != nil {
		return Shard{}, err
	}
	return out, nil
}

// chunkBytes is how much of a shard readShardInto holds at once (a
// multiple of every element size).
const chunkBytes = 1 << 20

// readShardInto streams one shard from its rank file in chunks of
// chunkBytes: each chunk is read, hashed and its elements in [lo, hi)
// copied into dst (which holds [lo, hi)); the whole shard is verified
// against its checksum at the end, and on a mismatch dst must not be used.
// Every byte is touched three times while it is in cache, and the memory
// is one chunk per shard read, whatever the shard's size, so the cost per
// byte does not grow with the checkpoint.
func (c *Checkpoint) readShardInto(name string, t TensorEntry, se ShardEntry, dst []byte, lo, hi int64) error {
	rf := c.files[se.Rank]
	info := rf.at[name] // present: checked by OpenRanges
	f, err := os.Open(rf.path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	size, total := int64(t.DType.Size()), info.End-info.Begin
	buf := make([]byte, min(chunkBytes, total))
	h := sha256.New()
	for off := int64(0); off < total; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), total-off)]
		if _, err := f.ReadAt(b, rf.data+info.Begin+off); err != nil {
			return fmt.Errorf("checkpoint: %s: tensor %q: %w (truncated?)", rf.path, name, err)
		}
		h.Write(b)
		place(dst, lo, hi, size, Shard{Lo: se.Lo, Hi: se.Hi, Slice: se.Slice}, se.Lo+off/size, b)
	}
	if hex.EncodeToString(h.Sum(nil)) != se.SHA256 {
		return fmt.Errorf("checkpoint: %s: tensor %q [%d, %d): checksum mismatch (the file is corrupt)", rf.path, name, se.Lo, se.Hi)
	}
	return nil
}

// firstErr is the first non-nil error (one line, as the project's errors are).
func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// overlaps reports whether shard se holds any of the elements [lo, hi).
func overlaps(se ShardEntry, lo, hi int64) bool {
	if se.Slice == nil {
		return se.Lo < hi && lo < se.Hi
	}
	hit := false
	se.Slice.runs(se.Lo, se.Hi, func(_, g, k int64) { hit = hit || g < hi && lo < g+k })
	return hit
}

// place copies into dst, which holds the global elements [lo, hi), those
// of shard s's box indices [w, w+len(data)/size) — data holds exactly them
// (all of s when w = s.Lo and data = s.Data) — that fall in [lo, hi).
// Shards are disjoint, so concurrent calls write disjoint bytes.
func place(dst []byte, lo, hi, size int64, s Shard, w int64, data []byte) {
	wEnd := min(w+int64(len(data))/size, s.Hi)
	put := func(box, g, k int64) { // box index box holds global g, for k elements
		b0, b1 := max(box, w), min(box+k, wEnd)
		if b0 >= b1 {
			return
		}
		g0 := g + b0 - box
		a, b := max(g0, lo), min(g0+b1-b0, hi)
		if a < b {
			copy(dst[(a-lo)*size:(b-lo)*size], data[(b0-w+a-g0)*size:])
		}
	}
	if s.Slice == nil {
		put(w, w, wEnd-w)
		return
	}
	s.Slice.runs(w, wEnd, put)
}
