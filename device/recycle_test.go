package device

import (
	"testing"

	"trellis/tensor"
)

// A freed large buffer's storage is handed to the next allocation of its
// length, zeroed; the accounting is the same as without reuse; small
// buffers and other lengths get fresh memory.
func TestFreedStorageIsReusedZeroed(t *testing.T) {
	d := New(Config{})
	n := spareMin / 4
	a, err := d.Alloc(Comm, n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Data {
		a.Data[i] = 1
	}
	first := &a.Data[0]
	a.Free()
	if live := d.Stats().Live[Comm]; live != 0 {
		t.Fatalf("live comm bytes after Free: %d", live)
	}
	b, err := d.Alloc(Comm, n)
	if err != nil {
		t.Fatal(err)
	}
	if &b.Data[0] != first {
		t.Error("the freed storage was not reused")
	}
	for i, v := range b.Data {
		if v != 0 {
			t.Fatalf("reused element %d = %g, want 0", i, v)
		}
	}
	if peak := d.Stats().Peak[Comm]; peak != int64(4*n) {
		t.Errorf("comm peak %d, want %d (one buffer at a time)", peak, 4*n)
	}
	c, _ := d.Alloc(Comm, n) // b still holds the kept slice: fresh memory
	if &c.Data[0] == &b.Data[0] {
		t.Error("a live buffer's storage was handed out again")
	}
	h, _ := d.AllocOf(Act, tensor.BF16, n)
	h.Bits[0] = 7
	h.Free()
	h2, _ := d.AllocOf(Act, tensor.BF16, n)
	if h2.Bits[0] != 0 {
		t.Error("a reused 16-bit buffer was not zeroed")
	}
	s, _ := d.Alloc(Comm, 16) // small: never kept
	s.Data[0] = 3
	s.Free()
	if s2, _ := d.Alloc(Comm, 16); s2.Data[0] != 0 {
		t.Error("a small buffer came back dirty")
	}
}
