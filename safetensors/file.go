package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"

	"trellis/internal/bounded"
	"trellis/internal/sysmem"
	"trellis/tensor"
)

// File is a parsed .safetensors file held in memory.
type File struct {
	name   string
	header *Header
	index  map[string]int // name -> position in header.Tensors
	data   []byte         // the data section
}

// ReadFile reads and validates the file at path, which must be a regular
// file (a device such as /dev/zero would read without end) no larger than
// this machine's memory (the whole file is held).
func ReadFile(path string) (*File, error) {
	limit := int64(math.MaxInt64)
	if mem, ok := sysmem.Physical(); ok {
		limit = mem
	}
	b, err := bounded.ReadRegular(path, limit, "safetensors file (read whole, so at most this machine's memory)")
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return Parse(path, b)
}

// Parse validates b, the bytes of a whole file; name is used in errors.
func Parse(name string, b []byte) (*File, error) {
	h, off, err := ParseHeader(b, int64(len(b)))
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", name, err)
	}
	f := &File{name: name, header: h, index: make(map[string]int, len(h.Tensors)), data: b[off:]}
	for i, t := range h.Tensors {
		f.index[t.Name] = i
	}
	return f, nil
}

// Name is the file name given to ReadFile or Parse.
func (f *File) Name() string { return f.name }

// Names lists the tensors in sorted order.
func (f *File) Names() []string {
	out := make([]string, len(f.header.Tensors))
	for i, t := range f.header.Tensors {
		out[i] = t.Name
	}
	return out
}

// Metadata returns a copy of the file's string metadata.
func (f *File) Metadata() map[string]string {
	out := make(map[string]string, len(f.header.Metadata))
	for k, v := range f.header.Metadata {
		out[k] = v
	}
	return out
}

// Info describes the named tensor.
func (f *File) Info(name string) (Info, error) {
	i, ok := f.index[name]
	if !ok {
		return Info{}, fmt.Errorf("safetensors: %s: no tensor %q", f.name, name)
	}
	t := f.header.Tensors[i]
	t.Shape = append(make([]int, 0, len(t.Shape)), t.Shape...)
	return t, nil
}

// Bytes returns the named tensor's raw little-endian bytes. The slice shares
// the file's memory: do not modify it.
func (f *File) Bytes(name string) ([]byte, error) {
	t, err := f.Info(name)
	if err != nil {
		return nil, err
	}
	return f.data[t.Begin:t.End:t.End], nil
}

// Float32 returns the named tensor widened (BF16, F16) or rounded (F64) to
// fp32; F32 is copied as is. Integer dtypes are an error.
func (f *File) Float32(name string) ([]float32, error) {
	t, err := f.Info(name)
	if err != nil {
		return nil, err
	}
	out, err := DecodeFloat32(t.DType, f.data[t.Begin:t.End])
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: tensor %q: %w", f.name, name, err)
	}
	return out, nil
}

// DecodeFloat32 converts little-endian raw bytes of a float dtype to fp32.
// len(b) must be a multiple of the dtype size.
func DecodeFloat32(d DType, b []byte) ([]float32, error) {
	sz := d.Size()
	if sz == 0 || len(b)%sz != 0 {
		return nil, fmt.Errorf("%d bytes are not a whole number of %s elements", len(b), d)
	}
	out := make([]float32, len(b)/sz)
	switch d {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = tensor.BF16Bits(binary.LittleEndian.Uint16(b[2*i:])).Float32()
		}
	case F16:
		for i := range out {
			out[i] = tensor.F16Bits(binary.LittleEndian.Uint16(b[2*i:])).Float32()
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	default:
		return nil, fmt.Errorf("dtype %s is not a float type (want F32, BF16, F16 or F64)", d)
	}
	return out, nil
}

// EncodeFloat32 converts v to little-endian bytes of dtype d (F32, BF16 or
// F16; the 16-bit formats round to nearest even).
func EncodeFloat32(d DType, v []float32) ([]byte, error) {
	switch d {
	case F32:
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b, nil
	case BF16:
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(tensor.ToBF16(x)))
		}
		return b, nil
	case F16:
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(tensor.ToF16(x)))
		}
		return b, nil
	}
	return nil, fmt.Errorf("safetensors: cannot encode fp32 values as %s (want F32, BF16 or F16)", d)
}
