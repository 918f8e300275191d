package commbench

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxSize is the largest size ParseBytes accepts (4 EiB), so that doubling
// it in a LO:HI range and multiplying it by a world size stay within int64.
// Whether a size fits this machine's memory is the caller's check.
const MaxSize = int64(1) << 62

// ParseBytes reads a size such as "64MiB", "1KiB", "4096", "2GiB", "2TiB"
// or "1MB" (KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000).
func ParseBytes(s string) (int64, error) {
	num := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSuffix(num, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("commbench: size %q: want a count of bytes such as 4096, 1KiB or 64MiB", s)
	}
	if n > MaxSize/mult {
		return 0, fmt.Errorf("commbench: size %q: larger than the largest size, 4 EiB", s)
	}
	return n * mult, nil
}

// ParseSizes reads "LO:HI" (every power-of-two multiple of LO up to HI, as
// nccl-tests' -b LO -e HI -f 2) or a comma-separated list.
func ParseSizes(s string) ([]int64, error) {
	if lo, hi, ok := strings.Cut(s, ":"); ok {
		a, err := ParseBytes(lo)
		if err != nil {
			return nil, err
		}
		b, err := ParseBytes(hi)
		if err != nil {
			return nil, err
		}
		if a < 1 || b < a {
			return nil, fmt.Errorf("commbench: sizes %q: want 1 ≤ LO ≤ HI", s)
		}
		var out []int64
		for v := a; v <= b; v *= 2 {
			out = append(out, v)
			if v > b/2 { // the next doubling passes HI (and might overflow)
				break
			}
		}
		return out, nil
	}
	var out []int64
	for _, part := range strings.Split(s, ",") {
		v, err := ParseBytes(part)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// FormatBytes prints n with the largest binary unit that divides it.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d%s", n/u.mult, u.suffix)
		}
	}
	return fmt.Sprintf("%dB", n)
}
