package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"trellis/tensor"
)

// sample returns tensors of every dtype, including a scalar and an empty one.
func sample() []Tensor {
	ts := []Tensor{
		FromFloat32("w", []int{2, 3}, []float32{1, -2, 3.5, 0, float32(math.Inf(1)), -0.25}),
		{Name: "i64", DType: I64, Shape: []int{2}, Data: []byte{1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{Name: "i32", DType: I32, Shape: []int{}, Data: []byte{7, 0, 0, 0}},
		{Name: "u16", DType: U16, Shape: []int{3}, Data: []byte{1, 0, 2, 0, 3, 0}},
		{Name: "u8", DType: U8, Shape: []int{0, 4}, Data: []byte{}},
		{Name: "bytes", DType: U8, Shape: []int{5}, Data: []byte("hello")},
	}
	bf, _ := FromFloat32As("bf", BF16, []int{4}, []float32{1, 1.00390625, -3, 1e-3})
	hf, _ := FromFloat32As("hf", F16, []int{2, 2}, []float32{1, 65504, 1e-7, -0.5})
	return append(ts, bf, hf)
}

func TestRoundTrip(t *testing.T) {
	meta := map[string]string{"format": "pt", "step": "10", "quote\"key": "ünïcode"}
	b, err := Encode(sample(), meta)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse("x.safetensors", b)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Metadata(); !reflect.DeepEqual(got, meta) {
		t.Errorf("metadata = %v, want %v", got, meta)
	}
	want := sample()
	if got := f.Names(); len(got) != len(want) {
		t.Fatalf("names = %v", got)
	}
	for _, w := range want {
		info, err := f.Info(w.Name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType != w.DType || !reflect.DeepEqual(info.Shape, w.Shape) {
			t.Errorf("%s: got %s %v, want %s %v", w.Name, info.DType, info.Shape, w.DType, w.Shape)
		}
		raw, _ := f.Bytes(w.Name)
		if !bytes.Equal(raw, w.Data) {
			t.Errorf("%s: bytes = %v, want %v", w.Name, raw, w.Data)
		}
	}
	if binary.LittleEndian.Uint64(b)%8 != 0 {
		t.Errorf("header length %d is not 8-aligned", binary.LittleEndian.Uint64(b))
	}
}

func TestFloat32Conversions(t *testing.T) {
	vals := []float32{1, -2.5, 3.14159, 1e-5, 65504, float32(math.Inf(-1))}
	for _, d := range []DType{F32, BF16, F16} {
		tt, err := FromFloat32As("x", d, []int{len(vals)}, vals)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Encode([]Tensor{tt}, nil)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Parse("x", b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Float32("x")
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			want := v
			switch d {
			case BF16:
				want = tensor.ToBF16(v).Float32()
			case F16:
				want = tensor.ToF16(v).Float32()
			}
			if got[i] != want {
				t.Errorf("%s[%d] = %v, want %v", d, i, got[i], want)
			}
		}
	}
	f64 := Tensor{Name: "d", DType: F64, Shape: []int{1}, Data: binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.1))}
	b, _ := Encode([]Tensor{f64, {Name: "n", DType: I32, Shape: []int{1}, Data: []byte{1, 0, 0, 0}}}, nil)
	f, err := Parse("mixed.safetensors", b)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Float32("d"); got[0] != float32(0.1) {
		t.Errorf("F64 0.1 read as %v", got[0])
	}
	if _, err := f.Float32("n"); err == nil || !strings.Contains(err.Error(), `mixed.safetensors: tensor "n"`) {
		t.Errorf("Float32 of I32: err = %v, want one naming file and tensor", err)
	}
	if _, err := f.Float32("missing"); err == nil || !strings.Contains(err.Error(), `no tensor "missing"`) {
		t.Errorf("missing tensor: err = %v", err)
	}
}

// TestGolden pins the exact bytes of a small file, built independently of
// the writer: the format's documented layout.
func TestGolden(t *testing.T) {
	hdr := `{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[1,1],"data_offsets":[8,9]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	want = append(want, hdr...)
	want = binary.LittleEndian.AppendUint32(want, math.Float32bits(1.5))
	want = binary.LittleEndian.AppendUint32(want, math.Float32bits(-2))
	want = append(want, 9)
	// Given out of order: the writer sorts.
	got, err := Encode([]Tensor{{Name: "b", DType: U8, Shape: []int{1, 1}, Data: []byte{9}},
		FromFloat32("a", []int{2}, []float32{1.5, -2})}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("bytes:\n got %q\nwant %q", got, want)
	}
}

func TestWriteFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteFile(p, sample(), nil); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Float32("w"); got[2] != 3.5 {
		t.Errorf("w[2] = %v", got[2])
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temp left)", len(entries))
	}
	if _, err := ReadFile(p + ".missing"); err == nil {
		t.Error("reading a missing file succeeded")
	}
}

func TestWriterRejects(t *testing.T) {
	cases := []struct {
		name string
		ts   []Tensor
		meta map[string]string
		want string
	}{
		{"dup", []Tensor{FromFloat32("a", []int{1}, []float32{1}), FromFloat32("a", []int{1}, []float32{2})}, nil, `duplicate tensor "a"`},
		{"empty name", []Tensor{FromFloat32("", []int{1}, []float32{1})}, nil, "invalid tensor name"},
		{"reserved", []Tensor{FromFloat32("__metadata__", []int{1}, []float32{1})}, nil, "invalid tensor name"},
		{"bad utf8", []Tensor{FromFloat32("\xff", []int{1}, []float32{1})}, nil, "invalid tensor name"},
		{"dtype", []Tensor{{Name: "x", DType: "Q4", Shape: []int{1}, Data: []byte{0}}}, nil, `tensor "x": unknown dtype "Q4"`},
		{"size", []Tensor{{Name: "x", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, nil, `tensor "x": 4 bytes of data; dtype F32 and shape [2] need 8`},
		{"negative", []Tensor{{Name: "x", DType: U8, Shape: []int{-1}}}, nil, "negative dim"},
		{"meta utf8", nil, map[string]string{"k": "\xfe"}, "not valid UTF-8"},
	}
	for _, c := range cases {
		_, err := Encode(c.ts, c.meta)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := FromFloat32As("x", I32, []int{1}, []float32{1}); err == nil {
		t.Error("FromFloat32As(I32) succeeded")
	}
}
