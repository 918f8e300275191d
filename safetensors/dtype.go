// Package safetensors reads and writes the Hugging Face .safetensors format:
//
//	[8 bytes]  N, the header length, unsigned little-endian
//	[N bytes]  a JSON object, padded with spaces to 8-byte alignment:
//	           {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//	            "__metadata__": {"key": "value"}}
//	[...]      the data section: every tensor's bytes, row-major little-endian,
//	           at [begin, end) relative to the start of the data section
//
// The reader trusts nothing: the header length is bounded, the JSON must be an
// object of known fields, every tensor's byte size must equal numel·dtype size,
// and the tensors must tile the data section exactly (no overlap, no hole, no
// trailing bytes). Errors name the file and the tensor.
//
// The writer lays tensors out in sorted-name order, so the same tensors and
// metadata always give the same bytes.
package safetensors

import "fmt"

// DType is a safetensors element type, spelled as in the header ("F32").
type DType string

// The element types this package reads and writes.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	BF16 DType = "BF16"
	F16  DType = "F16"
	I64  DType = "I64"
	I32  DType = "I32"
	I16  DType = "I16"
	I8   DType = "I8"
	U64  DType = "U64"
	U32  DType = "U32"
	U16  DType = "U16"
	U8   DType = "U8"
	Bool DType = "BOOL"
)

// Size is the width of one element in bytes, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case F64, I64, U64:
		return 8
	case F32, I32, U32:
		return 4
	case BF16, F16, I16, U16:
		return 2
	case I8, U8, Bool:
		return 1
	}
	return 0
}

// Valid reports whether d is a dtype this package knows.
func (d DType) Valid() bool { return d.Size() > 0 }

// checkDType returns an error for an unknown dtype.
func checkDType(d DType) error {
	if !d.Valid() {
		return fmt.Errorf("unknown dtype %q", string(d))
	}
	return nil
}
