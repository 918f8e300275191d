package mesh

import (
	"fmt"
	"strings"
)

// Mesh is a validated layout. It is immutable and safe to share.
type Mesh struct {
	cfg     Config
	order   [4]Axis // fastest-varying first
	stride  [4]int  // stride[i] of order[i]
	size    int
	perNode int
}

// New validates cfg and builds the mesh.
func New(cfg Config) (*Mesh, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	order, _ := parseOrder(cfg.Order)
	m := &Mesh{cfg: cfg, order: order, size: cfg.Size(), perNode: cfg.RanksPerNode}
	s := 1
	for i, a := range order {
		m.stride[i] = s
		s *= cfg.dim(a)
	}
	if m.perNode == 0 {
		m.perNode = m.size
	}
	return m, nil
}

// Config returns the configuration the mesh was built from.
func (m *Mesh) Config() Config { return m.cfg }

// Size is the number of ranks.
func (m *Mesh) Size() int { return m.size }

// Dim is the size of axis a.
func (m *Mesh) Dim(a Axis) int { return m.cfg.dim(a) }

// Order lists the axes fastest-varying first.
func (m *Mesh) Order() [4]Axis { return m.order }

// Coords returns the coordinates of rank.
func (m *Mesh) Coords(rank int) (Coord, error) {
	var c Coord
	if rank < 0 || rank >= m.size {
		return c, fmt.Errorf("mesh: rank %d out of range [0, %d)", rank, m.size)
	}
	for i, a := range m.order {
		c.set(a, rank/m.stride[i]%m.cfg.dim(a))
	}
	return c, nil
}

// Rank returns the rank at coordinates c.
func (m *Mesh) Rank(c Coord) (int, error) {
	r := 0
	for i, a := range m.order {
		v := c.Get(a)
		if v < 0 || v >= m.cfg.dim(a) {
			return 0, fmt.Errorf("mesh: coordinate %s=%d out of range [0, %d)", a, v, m.cfg.dim(a))
		}
		r += v * m.stride[i]
	}
	return r, nil
}

// axisMask turns a list of axes into a membership set indexed like m.order.
func (m *Mesh) axisMask(axes []Axis) ([4]bool, error) {
	var in [4]bool
	if len(axes) == 0 {
		return in, fmt.Errorf("mesh: a group needs at least one axis")
	}
	for _, a := range axes {
		found := false
		for i, b := range m.order {
			if a == b {
				in[i], found = true, true
			}
		}
		if !found {
			return in, fmt.Errorf("mesh: unknown axis %q (want pp, dp, cp or tp)", string(a))
		}
	}
	return in, nil
}

// Group returns the ranks of the group along axes (one or several, in any
// order) that contains rank, in ascending order. The index of a member in the
// list is its rank within the group.
//
// For example Group(r, DP, CP) is the gradient-reduction group of rank r,
// and Group(r, TP) its tensor-parallel group.
func (m *Mesh) Group(rank int, axes ...Axis) ([]int, error) {
	if rank < 0 || rank >= m.size {
		return nil, fmt.Errorf("mesh: rank %d out of range [0, %d)", rank, m.size)
	}
	in, err := m.axisMask(axes)
	if err != nil {
		return nil, err
	}
	// base: rank with the chosen axes' coordinates zeroed.
	base := rank
	n := 1
	for i, a := range m.order {
		if in[i] {
			base -= (rank / m.stride[i] % m.cfg.dim(a)) * m.stride[i]
			n *= m.cfg.dim(a)
		}
	}
	out := make([]int, 0, n)
	for k := 0; k < n; k++ {
		// k enumerates the chosen axes mixed-radix, fastest axis first,
		// which yields ascending ranks.
		r, rest := base, k
		for i, a := range m.order {
			if in[i] {
				d := m.cfg.dim(a)
				r += (rest % d) * m.stride[i]
				rest /= d
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// Groups returns every group along axes, each in ascending rank order, the
// groups ordered by their lowest rank. Every rank is in exactly one group.
func (m *Mesh) Groups(axes ...Axis) ([][]int, error) {
	if _, err := m.axisMask(axes); err != nil {
		return nil, err
	}
	seen := make([]bool, m.size)
	var out [][]int
	for r := 0; r < m.size; r++ {
		if seen[r] {
			continue
		}
		g, err := m.Group(r, axes...)
		if err != nil {
			return nil, err
		}
		for _, q := range g {
			seen[q] = true
		}
		out = append(out, g)
	}
	return out, nil
}

// GroupName is a canonical name for the groups along axes, the axes in mesh
// order fastest first, e.g. "cp-dp" for Group(r, DP, CP). Use it as the name
// passed to comm.Group.NewGroup so that every member agrees.
func (m *Mesh) GroupName(axes ...Axis) string {
	in, err := m.axisMask(axes)
	if err != nil {
		return ""
	}
	var parts []string
	for i, a := range m.order {
		if in[i] {
			parts = append(parts, string(a))
		}
	}
	return strings.Join(parts, "-")
}

// RanksPerNode is the node size (the world size when not configured).
func (m *Mesh) RanksPerNode() int { return m.perNode }

// Nodes is the number of nodes, counting a partly filled last node.
func (m *Mesh) Nodes() int { return (m.size + m.perNode - 1) / m.perNode }

// Node returns the node that holds rank.
func (m *Mesh) Node(rank int) int { return rank / m.perNode }

// SpansNodes reports whether the ranks sit on more than one node.
func (m *Mesh) SpansNodes(ranks []int) bool {
	for _, r := range ranks {
		if m.Node(r) != m.Node(ranks[0]) {
			return true
		}
	}
	return false
}
