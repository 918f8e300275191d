package device

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseBytes reads a size such as "512MiB", "4GiB", "1.5 GB", "300M" or
// "1048576". Binary suffixes (KiB, MiB, GiB, TiB, and the bare K, M, G, T) are
// powers of 1024; decimal ones (KB, MB, GB, TB) are powers of 1000.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.ToLower(strings.TrimSpace(t[i:]))
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if mult == 0 || err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q: want a number with an optional unit such as 512MiB or 4GiB", s)
	}
	return int64(v * mult), nil
}
