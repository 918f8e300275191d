package sysmem

import (
	"runtime"
	"testing"
)

func TestParseMeminfo(t *testing.T) {
	text := []byte("MemTotal:       24576000 kB\nMemFree:         1000 kB\nHugePages_Total:       0\n")
	for _, c := range []struct {
		key  string
		want int64
		ok   bool
	}{
		{"MemTotal", 24576000 * 1024, true},
		{"MemFree", 1000 * 1024, true},
		{"HugePages_Total", 0, true},
		{"MemAvailable", 0, false},
	} {
		got, ok := ParseMeminfo(text, c.key)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got %d, %v; want %d, %v", c.key, got, ok, c.want, c.ok)
		}
	}
	if _, ok := ParseMeminfo([]byte("MemTotal: lots kB\n"), "MemTotal"); ok {
		t.Error("a non-numeric MemTotal was accepted")
	}
}

func TestPhysical(t *testing.T) {
	n, ok := Physical()
	if runtime.GOOS == "linux" && (!ok || n < 1<<20) {
		t.Fatalf("Physical() = %d, %v on Linux", n, ok)
	}
}
