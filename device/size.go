package device

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxBytes is the largest size ParseBytes accepts, 2^62 bytes (4 EiB):
// every product a caller forms from it with small factors (×4 for fp32,
// ×2 for a pair of buffers) still fits an int64.
const MaxBytes = int64(1) << 62

// ParseBytes reads a size such as "512MiB", "4GiB", "1.5 GB", "300M" or
// "1048576". Binary suffixes (KiB, MiB, GiB, TiB, PiB, and the bare K, M, G,
// T, P) are powers of 1024; decimal ones (KB, MB, GB, TB, PB) are powers of
// 1000. A fractional result is rounded down to whole bytes, but a positive
// size under one byte ("0.5") is an error, not 0, and so is anything above
// MaxBytes ("1e30"), NaN or infinity: callers read 0 as "none", and a
// wrapped product as a negative size.
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
		"p": 1 << 50, "pib": 1 << 50, "pb": 1e15,
	}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if mult == 0 || err != nil || !(v >= 0) || strings.ContainsAny(num, "xXpP_") {
		return 0, fmt.Errorf("bad size %q: want a number with an optional unit such as 512MiB or 4GiB", s)
	}
	x := v * mult
	switch {
	case x >= float64(MaxBytes) || math.IsInf(x, 0):
		return 0, fmt.Errorf("bad size %q: larger than the largest size, %s", s, FormatBytes(MaxBytes))
	case x > 0 && x < 1:
		return 0, fmt.Errorf("bad size %q: less than one byte (sizes count whole bytes; add a unit such as MiB)", s)
	}
	return int64(x), nil
}
