package arch

// ParamCount is NumParams as a float64 for any Config with non-negative
// fields, valid or not, so that a caller can compare it with a budget
// before anything (Layout, which is itself O(L), included) is built for an
// absurd configuration: V·C + T·C + L·(12C² + 13C) + 2C.
func (c Config) ParamCount() float64 {
	C, L := float64(c.Hidden), float64(c.Layers)
	return float64(c.Vocab)*C + float64(c.SeqLen)*C + L*(12*C*C+13*C) + 2*C
}
