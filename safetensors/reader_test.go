package safetensors

import (
	"encoding/binary"
	"strings"
	"testing"
)

// file assembles a file from a header text and a data section, padding nothing.
func file(hdr string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	return append(append(b, hdr...), data...)
}

func TestReaderRejects(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	huge := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "shorter than the 8-byte header length"},
		{"huge header", append(huge, "{}"...), "exceeds the 104857600-byte limit"},
		{"header past end", binary.LittleEndian.AppendUint64(nil, 100), "header length 100 exceeds the 0 bytes"},
		{"not json", file("{nope", nil), "header:"},
		{"not object", file("[1]", nil), "not a JSON object"},
		{"blank", file("    ", nil), "not a JSON object"},
		{"trailing json", file(ok+"{}", make([]byte, 8)), "trailing data"},
		{"dtype", file(`{"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 1)), `tensor "a": unknown dtype "F8"`},
		{"size", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)), `tensor "a": data_offsets [0, 8] hold 8 bytes; dtype F32 and shape [3] need 12`},
		{"reversed", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, make([]byte, 4)), `tensor "a": data_offsets [4, 0] are not an increasing range`},
		{"negative dim", file(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, nil), `tensor "a":`},
		{"huge dim", file(`{"a":{"dtype":"U8","shape":[4294967296],"data_offsets":[0,0]}}`, nil), "too large"},
		{"overflow", file(`{"a":{"dtype":"F64","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,0]}}`, nil), "too large"},
		{"no shape", file(`{"a":{"dtype":"U8","data_offsets":[0,0]}}`, nil), "missing shape"},
		{"no offsets", file(`{"a":{"dtype":"U8","shape":[0]}}`, nil), "data_offsets must be"},
		{"three offsets", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0,0]}}`, nil), "data_offsets must be"},
		{"unknown field", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1}}`, nil), `tensor "a": json: unknown field "x"`},
		{"duplicate", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), `duplicate key "a"`},
		{"empty name", file(`{"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), "empty tensor name"},
		{"metadata type", file(`{"__metadata__":{"k":1}}`, nil), "__metadata__"},
		{"past end", file(ok, make([]byte, 4)), `tensor "a": data_offsets [0, 8] run past the 4-byte data section`},
		{"trailing bytes", file(ok, make([]byte, 12)), "tensors cover 8 bytes of the 12-byte data section"},
		{"hole", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), `tensor "a": data_offsets [1, 2] leave a hole at [0, 1)`},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, make([]byte, 3)), `tensor "b": data_offsets [1, 3] overlap tensor "a"`},
	}
	for _, c := range cases {
		_, err := Parse("bad.safetensors", c.b)
		if err == nil {
			t.Errorf("%s: parsed", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "safetensors: bad.safetensors: ") {
			t.Errorf("%s: err = %v, want the file name and %q", c.name, err, c.want)
		}
	}
}

func TestReaderAccepts(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
	}{
		{"no tensors", file("{}", nil)},
		{"padded", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}   `, []byte{1})},
		{"two empties", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]}}`, nil)},
		{"out of order", file(`{"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{1, 2})},
		{"null metadata", file(`{"__metadata__":null}`, nil)},
	}
	for _, c := range cases {
		f, err := Parse("good", c.b)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if f.Metadata() == nil {
			t.Errorf("%s: nil metadata", c.name)
		}
	}
}

// FuzzParseHeader feeds arbitrary bytes to the decoder: it must never panic,
// and whatever it accepts must survive a write and a re-read unchanged.
func FuzzParseHeader(f *testing.F) {
	good, _ := Encode(sample(), map[string]string{"a": "b"})
	f.Add(good)
	f.Add(file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}))
	f.Add(file(`{"__metadata__":{"x":"y"}}`, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse("fuzz", b)
		if err != nil {
			return
		}
		var ts []Tensor
		for _, n := range file.Names() {
			info, _ := file.Info(n)
			raw, _ := file.Bytes(n)
			ts = append(ts, Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: raw})
		}
		out, err := Encode(ts, file.Metadata())
		if err != nil {
			t.Fatalf("re-encoding an accepted file: %v", err)
		}
		again, err := Parse("again", out)
		if err != nil {
			t.Fatalf("re-reading: %v", err)
		}
		for _, n := range file.Names() {
			a, _ := file.Bytes(n)
			b, _ := again.Bytes(n)
			if string(a) != string(b) {
				t.Fatalf("tensor %q changed", n)
			}
		}
	})
}
