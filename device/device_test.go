package device

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestAccounting(t *testing.T) {
	d := New(Config{ID: 2})
	a, err := d.Alloc(Param, 100)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.Alloc(Act, 50)
	if s := d.Stats(); s.Live[Param] != 400 || s.Live[Act] != 200 || s.LiveTotal != 600 || s.PeakTotal != 600 {
		t.Fatalf("stats %+v", s)
	}
	b.Free()
	b.Free() // no-op
	c, _ := d.Alloc(Act, 10)
	s := d.Stats()
	if s.Live[Act] != 40 || s.Peak[Act] != 200 || s.PeakTotal != 600 || s.LiveTotal != 440 {
		t.Fatalf("after free %+v", s)
	}
	if err := d.Reserve(Comm, 8); err != nil {
		t.Fatal(err)
	}
	d.Release(Comm, 8)
	a.Free()
	c.Free()
	d.ResetPeak()
	if s := d.Stats(); s.PeakTotal != 0 || s.Peak[Param] != 0 {
		t.Fatalf("reset %+v", s)
	}
}

func TestOOMMessage(t *testing.T) {
	const MiB = 1 << 20
	d := New(Config{ID: 0, Budget: 1280 * MiB})
	for _, r := range []struct {
		tag Tag
		n   int64
	}{{Param, 300 * MiB}, {Grad, 300 * MiB}, {Optim, 600 * MiB}, {Act, 50 * MiB}} {
		if err := d.Reserve(r.tag, r.n); err != nil {
			t.Fatal(err)
		}
	}
	_, err := d.Alloc(Act, 48*MiB/4)
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("want OOM, got %v", err)
	}
	want := "device 0: out of memory: tried to allocate 48.0 MiB (act); 1.22 GiB of 1.25 GiB in use: param 300 MiB, grad 300 MiB, optim 600 MiB, act 50.0 MiB"
	if err.Error() != want {
		t.Fatalf("got  %s\nwant %s", err, want)
	}
	if s := d.Stats(); s.Live[Act] != 50*MiB {
		t.Fatalf("failed alloc changed accounting: %+v", s)
	}
}

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {512, "512 B"}, {1024, "1.00 KiB"}, {48 << 20, "48.0 MiB"}, {300 << 20, "300 MiB"},
		{1<<30 + 1<<28, "1.25 GiB"}, {1023<<20 + 1<<19, "1.00 GiB"}, {-2048, "-2.00 KiB"},
		{1 << 62, "4.00 EiB"}, {math.MaxInt64, "8.00 EiB"}} {
		if got := FormatBytes(c.n); got != c.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		s    string
		want int64
	}{{"512MiB", 512 << 20}, {"4GiB", 4 << 30}, {"1.5 GB", 1500000000}, {"300M", 300 << 20}, {"1048576", 1 << 20}, {"2kb", 2000},
		{"2TiB", 2 << 40}, {"1PiB", 1 << 50}, {"0", 0}, {"1.5", 1}, {"4e3", 4000}} {
		got, err := ParseBytes(c.s)
		if err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.s, got, err, c.want)
		}
	}
	// Overflow, fractions of a byte and non-finite values are errors that
	// say which rule they break, not a wrapped or zero size.
	for _, c := range []struct{ s, why string }{
		{"", "want a number"}, {"abc", "want a number"}, {"12XB", "want a number"}, {"-1GiB", "want a number"},
		{"GiB", "want a number"}, {"NaN", "want a number"}, {"Inf", "want a number"}, {"0x10", "want a number"},
		{"1e30", "larger than the largest size"}, {"8EiB", "want a number"}, {"5000PiB", "larger than the largest size"},
		{"0.5", "less than one byte"}, {"1e-10GiB", "less than one byte"},
	} {
		_, err := ParseBytes(c.s)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("ParseBytes(%q) = %v; want an error saying %q", c.s, err, c.why)
		}
	}
}
