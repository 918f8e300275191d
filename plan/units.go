package plan

import (
	"fmt"
	"math"
)

// Units are chosen by magnitude, so that a 100 M-parameter model on a CPU
// host reads "124.4M params" and "1.3 GiB", not "0.12B" and "0.0 GiB".

// byteUnit is the largest binary unit not above b, and its size in bytes.
func byteUnit(b int64) (string, float64) {
	byteUnits := [...]string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	div, i := 1.0, 0
	for ; i < len(byteUnits)-1 && math.Abs(float64(b)) >= 1024*div; i++ {
		div *= 1024
	}
	return byteUnits[i], div
}

// Bytes formats a byte count in the unit of its magnitude, one decimal
// ("512 B", "3.5 MiB", "71.2 GiB").
func Bytes(b int64) string {
	if b >= MaxBytes {
		return "over 1 EiB"
	}
	u, div := byteUnit(b)
	if u == "B" {
		return fmt.Sprintf("%d B", b)
	}
	return fmt.Sprintf("%.1f %s", float64(b)/div, u)
}

// Count formats a count (parameters, tokens) with the SI suffix of its
// magnitude: "950", "124.4M", "8.03B", "1.00T".
func Count(x float64) string {
	switch a := math.Abs(x); {
	case a >= 1e12:
		return fmt.Sprintf("%.2fT", x/1e12)
	case a >= 1e9:
		return fmt.Sprintf("%.2fB", x/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.1fM", x/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.1fK", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

// secondUnit picks s, ms or µs for a table of times near t (its name and
// its size in seconds).
func secondUnit(t float64) (string, float64) {
	switch {
	case t >= 1:
		return "s", 1
	case t >= 1e-3:
		return "ms", 1e-3
	}
	return "µs", 1e-6
}
