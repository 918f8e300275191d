package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
)

// MaxHeaderSize bounds the JSON header (100 MB, the limit of the reference
// implementation): a larger length prefix is rejected before anything is read.
const MaxHeaderSize = 100 << 20

// metadataKey is the reserved header key holding string metadata.
const metadataKey = "__metadata__"

// Info describes one tensor of a file.
type Info struct {
	Name  string
	DType DType
	Shape []int
	// Begin and End are byte offsets into the data section: [Begin, End).
	Begin, End int64
}

// Numel is the product of the dims (1 for a scalar).
func (t Info) Numel() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Header is a decoded and validated header.
type Header struct {
	// Tensors sorted by name.
	Tensors  []Info
	Metadata map[string]string
}

// rawInfo mirrors one tensor entry of the JSON header.
type rawInfo struct {
	DType       DType     `json:"dtype"`
	Shape       []uint64  `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// ParseHeader validates the 8-byte length prefix and the JSON header at the
// start of b, a prefix (or all) of a file of fileSize bytes; everything after
// the header is the data section. It returns the header and the offset of the
// data section (8 + N).
func ParseHeader(b []byte, fileSize int64) (*Header, int64, error) {
	if len(b) < 8 || fileSize < 8 {
		return nil, 0, fmt.Errorf("file of %d bytes is shorter than the 8-byte header length", min(int64(len(b)), fileSize))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > MaxHeaderSize {
		return nil, 0, fmt.Errorf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(len(b)-8) || n > uint64(fileSize-8) {
		return nil, 0, fmt.Errorf("header length %d exceeds the %d bytes after the length prefix", n, min(int64(len(b)), fileSize)-8)
	}
	h, err := decodeHeader(b[8:8+n], fileSize-8-int64(n))
	if err != nil {
		return nil, 0, err
	}
	return h, 8 + int64(n), nil
}

// decodeHeader parses and validates the JSON header text.
func decodeHeader(js []byte, dataLen int64) (*Header, error) {
	if t := bytes.TrimLeft(js, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("header is not a JSON object")
	}
	raw, err := decodeObject(js)
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	h := &Header{Metadata: map[string]string{}}
	for name, v := range raw {
		if name == metadataKey {
			if err := strictUnmarshal(v, &h.Metadata); err != nil {
				return nil, fmt.Errorf("header: %s: %w", metadataKey, err)
			}
			if h.Metadata == nil {
				h.Metadata = map[string]string{}
			}
			continue
		}
		t, err := decodeInfo(name, v)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		h.Tensors = append(h.Tensors, t)
	}
	sort.Slice(h.Tensors, func(i, j int) bool { return h.Tensors[i].Name < h.Tensors[j].Name })
	if err := checkLayout(h.Tensors, dataLen); err != nil {
		return nil, err
	}
	return h, nil
}

// decodeObject reads a JSON object into raw values, rejecting duplicate keys
// (encoding/json would silently keep the last one).
func decodeObject(js []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	if _, err := dec.Token(); err != nil { // the '{' checked by the caller
		return nil, err
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("object key %v is not a string", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		out[key] = v
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}

// strictUnmarshal decodes v into dst, rejecting unknown fields.
func strictUnmarshal(v []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}

// decodeInfo validates one tensor entry: known dtype, dims that fit an int,
// a byte size equal to numel·dtype size that does not overflow.
func decodeInfo(name string, v json.RawMessage) (Info, error) {
	if name == "" {
		return Info{}, errors.New("empty tensor name")
	}
	var r rawInfo
	if err := strictUnmarshal(v, &r); err != nil {
		return Info{}, err
	}
	if err := checkDType(r.DType); err != nil {
		return Info{}, err
	}
	if r.Shape == nil {
		return Info{}, errors.New("missing shape")
	}
	if r.DataOffsets == nil || len(*r.DataOffsets) != 2 {
		return Info{}, errors.New("data_offsets must be [begin, end]")
	}
	t := Info{Name: name, DType: r.DType, Shape: make([]int, len(r.Shape))}
	size := uint64(r.DType.Size())
	for i, d := range r.Shape {
		if d > math.MaxInt32 || (d != 0 && size > math.MaxInt64/d) {
			return Info{}, fmt.Errorf("shape %v is too large", r.Shape)
		}
		size *= d
		t.Shape[i] = int(d)
	}
	b, e := (*r.DataOffsets)[0], (*r.DataOffsets)[1]
	if b > e || e > math.MaxInt64 {
		return Info{}, fmt.Errorf("data_offsets [%d, %d] are not an increasing range", b, e)
	}
	if e-b != size {
		return Info{}, fmt.Errorf("data_offsets [%d, %d] hold %d bytes; dtype %s and shape %v need %d", b, e, e-b, t.DType, t.Shape, size)
	}
	t.Begin, t.End = int64(b), int64(e)
	return t, nil
}

// checkLayout requires the tensors to tile [0, dataLen) exactly: sorted by
// offset, each begins where the previous ended, and the last ends at dataLen.
func checkLayout(ts []Info, dataLen int64) error {
	byOff := make([]Info, len(ts))
	copy(byOff, ts)
	sort.SliceStable(byOff, func(i, j int) bool {
		if byOff[i].Begin != byOff[j].Begin {
			return byOff[i].Begin < byOff[j].Begin
		}
		return byOff[i].End < byOff[j].End
	})
	at := int64(0)
	prev := ""
	for _, t := range byOff {
		switch {
		case t.Begin < at:
			return fmt.Errorf("tensor %q: data_offsets [%d, %d] overlap tensor %q, which ends at %d", t.Name, t.Begin, t.End, prev, at)
		case t.Begin > at:
			return fmt.Errorf("tensor %q: data_offsets [%d, %d] leave a hole at [%d, %d)", t.Name, t.Begin, t.End, at, t.Begin)
		case t.End > dataLen:
			return fmt.Errorf("tensor %q: data_offsets [%d, %d] run past the %d-byte data section", t.Name, t.Begin, t.End, dataLen)
		}
		at, prev = t.End, t.Name
	}
	if at != dataLen {
		return fmt.Errorf("tensors cover %d bytes of the %d-byte data section", at, dataLen)
	}
	return nil
}
