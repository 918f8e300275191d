// Package mesh lays the world's ranks out on a four-axis device mesh: pipeline
// (pp), data (dp), context (cp) and tensor (tp) parallelism. It is pure: no
// I/O, no goroutines, no communication — it only answers which ranks form the
// group along an axis, so that every rank builds the same groups.
//
// Layout. The order string lists the axes from fastest- to slowest-varying;
// the default "tp-cp-dp-pp" makes tp vary fastest, so the ranks of a TP group
// are consecutive and sit inside one node. With order a0-a1-a2-a3 and sizes
// n0..n3,
//
//	rank = c0 + n0·(c1 + n1·(c2 + n2·c3)),   0 ≤ ci < ni
//
// and the world size is n0·n1·n2·n3. Nodes hold RanksPerNode consecutive
// ranks: node(rank) = ⌊rank / RanksPerNode⌋.
//
// Groups. The group along a set of axes containing a rank is every rank whose
// coordinates agree with it on the other axes. Its members are listed in
// ascending world rank, which is also the mixed-radix order of the chosen
// axes (so a member's index in the list is its group rank, the same on every
// member).
package mesh

import (
	"fmt"
	"strings"
)

// Axis names a mesh axis.
type Axis string

// The four axes.
const (
	PP Axis = "pp" // pipeline stages
	DP Axis = "dp" // data-parallel replicas (and ZeRO shards)
	CP Axis = "cp" // context (sequence) parallelism
	TP Axis = "tp" // tensor parallelism
)

// Axes lists the axes in canonical order (pp, dp, cp, tp).
func Axes() [4]Axis { return [4]Axis{PP, DP, CP, TP} }

// DefaultOrder is the layout used when Config.Order is empty: tp fastest.
const DefaultOrder = "tp-cp-dp-pp"

// ParseAxis accepts "pp", "dp", "cp" or "tp" (any case).
func ParseAxis(s string) (Axis, error) {
	a := Axis(strings.ToLower(strings.TrimSpace(s)))
	for _, b := range Axes() {
		if a == b {
			return a, nil
		}
	}
	return "", fmt.Errorf("mesh: unknown axis %q (want pp, dp, cp or tp)", s)
}

// Config sizes the mesh.
type Config struct {
	PP, DP, CP, TP int
	// Order lists the four axes fastest-varying first, joined by "-";
	// empty means DefaultOrder.
	Order string
	// RanksPerNode is the number of consecutive ranks on one node; 0 means
	// the whole world is one node.
	RanksPerNode int
	// World, if non-zero, is the world size the mesh must cover exactly.
	World int
}

// Size is the product of the axis sizes.
func (c Config) Size() int { return c.PP * c.DP * c.CP * c.TP }

func (c Config) dim(a Axis) int {
	switch a {
	case PP:
		return c.PP
	case DP:
		return c.DP
	case CP:
		return c.CP
	}
	return c.TP
}

// Validate checks every axis size is at least 1, the order string names each
// axis once, RanksPerNode is not negative, and, when World is set, that the
// product of the axis sizes equals it.
func (c Config) Validate() error {
	for _, a := range Axes() {
		if n := c.dim(a); n < 1 {
			return fmt.Errorf("mesh: %s=%d: every axis size must be at least 1", a, n)
		}
	}
	if _, err := parseOrder(c.Order); err != nil {
		return err
	}
	if c.RanksPerNode < 0 {
		return fmt.Errorf("mesh: ranks per node=%d must not be negative", c.RanksPerNode)
	}
	if c.World < 0 {
		return fmt.Errorf("mesh: world size=%d must not be negative", c.World)
	}
	if c.World != 0 && c.Size() != c.World {
		return fmt.Errorf("mesh: pp=%d × dp=%d × cp=%d × tp=%d = %d ≠ world size %d",
			c.PP, c.DP, c.CP, c.TP, c.Size(), c.World)
	}
	return nil
}

// parseOrder returns the axes fastest-first.
func parseOrder(s string) ([4]Axis, error) {
	var out [4]Axis
	if s == "" {
		s = DefaultOrder
	}
	parts := strings.Split(s, "-")
	if len(parts) != 4 {
		return out, fmt.Errorf("mesh: order %q must list the 4 axes pp, dp, cp, tp joined by '-'", s)
	}
	seen := map[Axis]bool{}
	for i, p := range parts {
		a, err := ParseAxis(p)
		if err != nil {
			return out, fmt.Errorf("mesh: order %q: %w", s, err)
		}
		if seen[a] {
			return out, fmt.Errorf("mesh: order %q names %s twice", s, a)
		}
		seen[a] = true
		out[i] = a
	}
	return out, nil
}

// Coord is a rank's position on the mesh.
type Coord struct{ PP, DP, CP, TP int }

// Get returns the coordinate along a.
func (c Coord) Get(a Axis) int {
	switch a {
	case PP:
		return c.PP
	case DP:
		return c.DP
	case CP:
		return c.CP
	}
	return c.TP
}

func (c *Coord) set(a Axis, v int) {
	switch a {
	case PP:
		c.PP = v
	case DP:
		c.DP = v
	case CP:
		c.CP = v
	default:
		c.TP = v
	}
}

func (c Coord) String() string {
	return fmt.Sprintf("(pp=%d dp=%d cp=%d tp=%d)", c.PP, c.DP, c.CP, c.TP)
}
