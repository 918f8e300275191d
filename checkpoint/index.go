package checkpoint

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"trellis/safetensors"
)

// Index is the content of a step's index.json.
type Index struct {
	Version int    `json:"version"`
	Step    int    `json:"step"`
	World   int    `json:"world"`
	Plan    string `json:"plan"`
	// Meta is the caller's JSON, stored as given (compacted).
	Meta    json.RawMessage        `json:"meta,omitempty"`
	Tensors map[string]TensorEntry `json:"tensors"`
	// Files lists one file per rank, in rank order.
	Files []FileEntry `json:"files"`
}

// TensorEntry locates one global tensor across the ranks.
type TensorEntry struct {
	Shape []int             `json:"shape"`
	DType safetensors.DType `json:"dtype"`
	// Shards tile [0, numel) in order of Lo.
	Shards []ShardEntry `json:"shards"`
}

// ShardEntry says that rank Rank holds elements [Lo, Hi) of the tensor,
// or with a Slice of that box of it.
type ShardEntry struct {
	Rank  int    `json:"rank"`
	Slice *Slice `json:"slice,omitempty"`
	Lo    int64  `json:"lo"`
	Hi    int64  `json:"hi"`
	// SHA256 is the lower-case hex SHA-256 of the shard's bytes, so that a
	// partial read verifies what it reads (OpenRanges); absent in
	// checkpoints written before it existed.
	SHA256 string `json:"sha256,omitempty"`
}

// FileEntry is one rank file's name, size and SHA-256 (lower-case hex).
type FileEntry struct {
	Name   string `json:"name"`
	Rank   int    `json:"rank"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// encodeIndex renders the index as indented JSON (map keys sorted, so the
// output is deterministic).
func encodeIndex(ix *Index) ([]byte, error) {
	b, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeIndex parses and validates index.json bytes: known version, no
// unknown fields, one well-formed file entry per rank, and for every tensor
// a valid dtype and shape and shards that tile [0, numel) exactly.
func DecodeIndex(b []byte) (*Index, error) {
	if len(b) > maxIndexSize {
		return nil, fmt.Errorf("%d bytes exceeds the %d-byte limit", len(b), maxIndexSize)
	}
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	if v.Version != Version {
		return nil, fmt.Errorf("format version %d, this build reads version %d", v.Version, Version)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	ix := &Index{}
	if err := dec.Decode(ix); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	if err := ix.validate(); err != nil {
		return nil, err
	}
	return ix, nil
}

// validate checks everything but the files' contents.
func (ix *Index) validate() error {
	if ix.Step < 0 {
		return fmt.Errorf("step %d is negative", ix.Step)
	}
	if ix.World < 1 || ix.World > maxWorld {
		return fmt.Errorf("world %d is not in [1, %d]", ix.World, maxWorld)
	}
	if len(ix.Files) != ix.World {
		return fmt.Errorf("%d files listed for world %d", len(ix.Files), ix.World)
	}
	for r, f := range ix.Files {
		if err := f.validate(r, ix.World); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(ix.Tensors))
	for name := range ix.Tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := ix.Tensors[name].validate(ix.World); err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
	}
	return nil
}

func (f FileEntry) validate(rank, world int) error {
	want := RankFileName(rank, world)
	if f.Rank != rank || f.Name != want {
		return fmt.Errorf("file %d is %q of rank %d, want %q", rank, f.Name, f.Rank, want)
	}
	if f.Size < 0 {
		return fmt.Errorf("file %s: negative size %d", f.Name, f.Size)
	}
	if !validSum(f.SHA256) {
		return fmt.Errorf("file %s: sha256 %q is not 64 lower-case hex digits", f.Name, f.SHA256)
	}
	return nil
}

func (t TensorEntry) validate(world int) error {
	if !t.DType.Valid() {
		return fmt.Errorf("unknown dtype %q", t.DType)
	}
	if t.Shape == nil {
		return errors.New("missing shape")
	}
	for _, s := range t.Shards {
		if s.SHA256 != "" && !validSum(s.SHA256) {
			return fmt.Errorf("rank %d: shard sha256 %q is not 64 lower-case hex digits", s.Rank, s.SHA256)
		}
	}
	n, err := numel(t.Shape)
	if err != nil {
		return err
	}
	if !t.boxed() {
		return checkTiling(t.Shards, n, world)
	}
	var sum int64
	for _, s := range t.Shards {
		if s.Rank < 0 || s.Rank >= world {
			return fmt.Errorf("shard on rank %d of world %d", s.Rank, world)
		}
		m := n
		if s.Slice != nil {
			if m, err = s.Slice.validate(n); err != nil {
				return fmt.Errorf("rank %d: %w", s.Rank, err)
			}
		}
		if err := checkRange(s.Lo, s.Hi, m); err != nil {
			return fmt.Errorf("rank %d: %w", s.Rank, err)
		}
		sum += s.Hi - s.Lo
	}
	if sum != n {
		return fmt.Errorf("shards hold %d elements of %d", sum, n)
	}
	return nil // that they tile the tensor is checkBoxes', once the data is known to exist
}

// validSum reports whether s is 64 lower-case hex digits.
func validSum(s string) bool {
	d, err := hex.DecodeString(s)
	return err == nil && len(d) == 32 && hex.EncodeToString(d) == s
}

// checkBoxes checks that the N-d box shards of every tensor that has them
// cover each element exactly once. It allocates a bit per element, so it
// runs on an index whose files have been read (their sizes bound it).
func (ix *Index) checkBoxes() error {
	for name, t := range ix.Tensors {
		if !t.boxed() {
			continue
		}
		n, _ := numel(t.Shape)
		if err := coverage(t.Shards, n); err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
	}
	return nil
}

// dataBytes is the bytes the index says its tensors hold.
func (ix *Index) dataBytes() int64 {
	var b int64
	for _, t := range ix.Tensors {
		n, _ := numel(t.Shape)
		b += n * int64(t.DType.Size())
	}
	return b
}

// boxed says whether any shard of the tensor is an N-d box.
func (t TensorEntry) boxed() bool {
	for _, s := range t.Shards {
		if s.Slice != nil {
			return true
		}
	}
	return false
}

// checkTiling requires shards sorted by Lo to cover [0, n) with no gap and
// no overlap (a single [0, 0) shard for an empty tensor).
func checkTiling(shards []ShardEntry, n int64, world int) error {
	if len(shards) == 0 {
		return errors.New("no shards")
	}
	if n == 0 && len(shards) != 1 {
		return fmt.Errorf("%d shards of an empty tensor, want 1", len(shards))
	}
	at := int64(0)
	for _, s := range shards {
		if s.Rank < 0 || s.Rank >= world {
			return fmt.Errorf("shard on rank %d of world %d", s.Rank, world)
		}
		if err := checkRange(s.Lo, s.Hi, n); err != nil {
			return fmt.Errorf("rank %d: %w", s.Rank, err)
		}
		switch {
		case s.Lo < at:
			return fmt.Errorf("rank %d holds [%d, %d), overlapping [.., %d) held before it", s.Rank, s.Lo, s.Hi, at)
		case s.Lo > at:
			return fmt.Errorf("no rank holds [%d, %d)", at, s.Lo)
		}
		at = s.Hi
	}
	if at != n {
		return fmt.Errorf("no rank holds [%d, %d)", at, n)
	}
	return nil
}
