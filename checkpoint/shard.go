package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"trellis/safetensors"
)

// Shard is what one rank holds of a global tensor: elements [Lo, Hi) of the
// row-major flattening of a tensor of shape Shape, or, with a Slice, of
// that N-d box of it. A whole tensor is the shard [0, numel).
type Shard struct {
	Name  string
	Shape []int  // the global shape
	Slice *Slice // nil: Lo, Hi index the whole tensor
	Lo    int64
	Hi    int64
	DType safetensors.DType
	Data  []byte // (Hi-Lo)·DType.Size() bytes, little-endian
}

// Float32Shard makes an F32 shard of v holding elements [lo, lo+len(v)) of a
// tensor of global shape shape.
func Float32Shard(name string, shape []int, lo int64, v []float32) Shard {
	t := safetensors.FromFloat32(name, []int{len(v)}, v)
	return Shard{Name: name, Shape: append([]int(nil), shape...), Lo: lo, Hi: lo + int64(len(v)), DType: safetensors.F32, Data: t.Data}
}

// Whole makes an F32 shard holding the whole tensor v of the given shape.
func Whole(name string, shape []int, v []float32) Shard { return Float32Shard(name, shape, 0, v) }

// Float32 decodes the shard's data to fp32 (F32, BF16, F16 or F64).
func (s Shard) Float32() ([]float32, error) {
	v, err := safetensors.DecodeFloat32(s.DType, s.Data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: tensor %q: %w", s.Name, err)
	}
	return v, nil
}

// numel is the element count of shape, or an error when a dim is negative or
// the product overflows.
func numel(shape []int) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || (d > 0 && n > math.MaxInt64/8/int64(d)) {
			return 0, fmt.Errorf("shape %v is invalid or too large", shape)
		}
		n *= int64(d)
	}
	return n, nil
}

// checkRange requires 0 <= lo <= hi <= n with a non-empty range unless the
// tensor itself is empty.
func checkRange(lo, hi, n int64) error {
	if lo < 0 || hi > n || lo > hi || (lo == hi && n > 0) {
		return fmt.Errorf("range [%d, %d) is not a non-empty part of [0, %d)", lo, hi, n)
	}
	return nil
}

// validate checks one shard's fields against each other and its data.
func (s Shard) validate() error {
	if err := s.validateFields(); err != nil {
		return err
	}
	if want := (s.Hi - s.Lo) * int64(s.DType.Size()); int64(len(s.Data)) != want {
		return fmt.Errorf("tensor %q: %d bytes of data; [%d, %d) of %s needs %d", s.Name, len(s.Data), s.Lo, s.Hi, s.DType, want)
	}
	return nil
}

// validateFields checks everything but the data.
func (s Shard) validateFields() error {
	if s.Name == "" {
		return errors.New("shard with an empty name")
	}
	if !s.DType.Valid() {
		return fmt.Errorf("tensor %q: unknown dtype %q", s.Name, s.DType)
	}
	n, err := numel(s.Shape)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", s.Name, err)
	}
	if s.Slice != nil {
		if n, err = s.Slice.validate(n); err != nil {
			return fmt.Errorf("tensor %q of shape %v: %w", s.Name, s.Shape, err)
		}
	}
	return checkRangeOf(s, n)
}

func checkRangeOf(s Shard, n int64) error {
	if err := checkRange(s.Lo, s.Hi, n); err != nil {
		return fmt.Errorf("tensor %q of shape %v: %w", s.Name, s.Shape, err)
	}
	return nil
}

// localShape is the shape a shard is stored with in its rank's file: the
// global shape for a whole tensor, else a flat range.
func (s Shard) localShape() []int {
	if n, _ := numel(s.Shape); s.Slice == nil && s.Lo == 0 && s.Hi == n {
		return s.Shape
	}
	return []int{int(s.Hi - s.Lo)}
}

// fileMeta is the per-file record stored under metaKey in each rank file's
// safetensors metadata: enough to rebuild the global index from the files.
type fileMeta struct {
	Version int                  `json:"version"`
	Step    int                  `json:"step"`
	Rank    int                  `json:"rank"`
	World   int                  `json:"world"`
	Shards  map[string]shardMeta `json:"shards"`
}

type shardMeta struct {
	Shape []int  `json:"shape"`
	Slice *Slice `json:"slice,omitempty"`
	Lo    int64  `json:"lo"`
	Hi    int64  `json:"hi"`
}

// encodeRank validates shards and returns the safetensors tensors and
// metadata of a rank file.
func encodeRank(step, rank, world int, shards []Shard) ([]safetensors.Tensor, map[string]string, error) {
	fm := fileMeta{Version: Version, Step: step, Rank: rank, World: world, Shards: map[string]shardMeta{}}
	ts := make([]safetensors.Tensor, 0, len(shards))
	for _, s := range shards {
		if err := s.validate(); err != nil {
			return nil, nil, err
		}
		if _, dup := fm.Shards[s.Name]; dup {
			return nil, nil, fmt.Errorf("tensor %q given twice", s.Name)
		}
		fm.Shards[s.Name] = shardMeta{Shape: append([]int{}, s.Shape...), Slice: s.Slice, Lo: s.Lo, Hi: s.Hi}
		ts = append(ts, safetensors.Tensor{Name: s.Name, DType: s.DType, Shape: s.localShape(), Data: s.Data})
	}
	b, err := json.Marshal(fm)
	if err != nil {
		return nil, nil, err
	}
	return ts, map[string]string{metaKey: string(b)}, nil
}

// decodeRank reads a rank file's shards, checking its per-file record
// against the expected step, rank and world and against its tensors.
func decodeRank(f *safetensors.File, step, rank, world int) ([]Shard, error) {
	infos := make([]safetensors.Info, 0, len(f.Names()))
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		infos = append(infos, info)
	}
	out, err := recordShards(f.Metadata(), infos, step, rank, world)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Data, _ = f.Bytes(out[i].Name)
	}
	return out, nil
}

// recordShards checks a rank file's per-file record (its safetensors
// metadata) against the expected step, rank and world and against the
// file's tensors, and returns its shards, sorted by name, without data.
func recordShards(meta map[string]string, infos []safetensors.Info, step, rank, world int) ([]Shard, error) {
	var fm fileMeta
	raw, ok := meta[metaKey]
	if !ok {
		return nil, fmt.Errorf("no %q metadata: not a checkpoint rank file", metaKey)
	}
	if err := json.Unmarshal([]byte(raw), &fm); err != nil {
		return nil, fmt.Errorf("metadata %q: %w", metaKey, err)
	}
	if fm.Version != Version || fm.Step != step || fm.Rank != rank || fm.World != world {
		return nil, fmt.Errorf("holds version %d step %d rank %d of %d, want version %d step %d rank %d of %d",
			fm.Version, fm.Step, fm.Rank, fm.World, Version, step, rank, world)
	}
	if len(infos) != len(fm.Shards) {
		return nil, fmt.Errorf("%d tensors but %d shard records", len(infos), len(fm.Shards))
	}
	out := make([]Shard, 0, len(infos))
	for _, info := range infos {
		m, ok := fm.Shards[info.Name]
		if !ok {
			return nil, fmt.Errorf("tensor %q has no shard record", info.Name)
		}
		s := Shard{Name: info.Name, Shape: m.Shape, Slice: m.Slice, Lo: m.Lo, Hi: m.Hi, DType: info.DType}
		if err := s.validateFields(); err != nil {
			return nil, err
		}
		if want := (s.Hi - s.Lo) * int64(s.DType.Size()); info.End-info.Begin != want {
			return nil, fmt.Errorf("tensor %q: %d bytes of data; [%d, %d) of %s needs %d", s.Name, info.End-info.Begin, s.Lo, s.Hi, s.DType, want)
		}
		if !slices.Equal(info.Shape, s.localShape()) {
			return nil, fmt.Errorf("tensor %q: stored shape %v, want %v for [%d, %d) of %v", s.Name, info.Shape, s.localShape(), s.Lo, s.Hi, s.Shape)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
