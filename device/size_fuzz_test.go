package device

import (
	"strconv"
	"testing"
)

// FuzzParseBytes holds ParseBytes to its contract on any input: no panic;
// an accepted size is in [0, MaxBytes) and prints (FormatBytes) without a
// sign; the decimal it returns parses back to itself.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"512MiB", "4GiB", "1.5 GB", "300M", "1048576", "0", "0.5", "1e30", "2TiB",
		"-1", "NaN", "Inf", "0x1p70", "9223372036854775807", "4.6e18", " 7 kb ", "1_000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			return
		}
		if n < 0 || n >= MaxBytes {
			t.Fatalf("ParseBytes(%q) = %d, outside [0, MaxBytes)", s, n)
		}
		if out := FormatBytes(n); out == "" || out[0] == '-' {
			t.Fatalf("FormatBytes(%d) = %q", n, out)
		}
		if back, err := ParseBytes(strconv.FormatInt(n, 10)); err != nil || back != n {
			t.Fatalf("ParseBytes(%d) = %d, %v", n, back, err)
		}
	})
}
