package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Tensor is one named tensor to write: raw little-endian bytes of its dtype.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// FromFloat32 makes an F32 tensor of v (copied) with the given shape.
func FromFloat32(name string, shape []int, v []float32) Tensor {
	b, _ := EncodeFloat32(F32, v) // F32 never fails
	return Tensor{Name: name, DType: F32, Shape: append([]int(nil), shape...), Data: b}
}

// FromFloat32As makes a tensor of dtype d (F32, BF16 or F16) from v.
func FromFloat32As(name string, d DType, shape []int, v []float32) (Tensor, error) {
	b, err := EncodeFloat32(d, v)
	if err != nil {
		return Tensor{}, err
	}
	return Tensor{Name: name, DType: d, Shape: append([]int(nil), shape...), Data: b}, nil
}

// Encode returns the file bytes of tensors and metadata.
func Encode(tensors []Tensor, meta map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	if err := Write(&buf, tensors, meta); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes tensors (laid out in sorted-name order) and metadata to w.
// The same input always gives the same bytes.
func Write(w io.Writer, tensors []Tensor, meta map[string]string) error {
	ts, err := sortedChecked(tensors)
	if err != nil {
		return err
	}
	hdr, err := headerJSON(ts, meta)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hdr)))
	bw.Write(n[:])
	bw.Write(hdr)
	for _, t := range ts {
		bw.Write(t.Data)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

// WriteFile writes the file atomically: a temporary file in the same
// directory, fsync, then rename over path.
func WriteFile(path string, tensors []Tensor, meta map[string]string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = Write(tmp, tensors, meta); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// sortedChecked validates every tensor and returns them sorted by name.
func sortedChecked(tensors []Tensor) ([]Tensor, error) {
	ts := append([]Tensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	for i, t := range ts {
		if t.Name == "" || t.Name == metadataKey || !utf8.ValidString(t.Name) {
			return nil, fmt.Errorf("safetensors: invalid tensor name %q", t.Name)
		}
		if i > 0 && ts[i-1].Name == t.Name {
			return nil, fmt.Errorf("safetensors: duplicate tensor %q", t.Name)
		}
		if err := checkDType(t.DType); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
		}
		n := int64(t.DType.Size())
		for _, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("safetensors: tensor %q: negative dim in shape %v", t.Name, t.Shape)
			}
			n *= int64(d)
		}
		if int64(len(t.Data)) != n {
			return nil, fmt.Errorf("safetensors: tensor %q: %d bytes of data; dtype %s and shape %v need %d", t.Name, len(t.Data), t.DType, t.Shape, n)
		}
	}
	return ts, nil
}

// headerJSON builds the header: metadata first, then tensors in sorted order,
// padded with spaces to a multiple of 8 bytes.
func headerJSON(ts []Tensor, meta map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for k, v := range meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("safetensors: metadata %q: not valid UTF-8", k)
		}
	}
	if len(meta) > 0 {
		m, err := json.Marshal(meta) // map keys are sorted
		if err != nil {
			return nil, fmt.Errorf("safetensors: metadata: %w", err)
		}
		b.WriteString(`"` + metadataKey + `":`)
		b.Write(m)
	}
	off := int64(0)
	for i, t := range ts {
		if i > 0 || len(meta) > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		b.Write(name)
		b.WriteString(`:{"dtype":"` + string(t.DType) + `","shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		end := off + int64(len(t.Data))
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, off, end)
		off = end
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderSize {
		return nil, errors.New("safetensors: header exceeds the size limit")
	}
	return b.Bytes(), nil
}
