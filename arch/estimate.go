package arch

// ParamCount is NumParams as a float64 for any Config with non-negative
// fields, valid or not, so that a caller can compare it with a budget
// before anything (Layout, which is itself O(L), included) is built for an
// absurd configuration: GPT-2's V·C + T·C + L·(12C² + 13C) + 2C, or
// Llama's terms (NumParams).
func (c Config) ParamCount() float64 {
	var n float64
	for _, t := range c.paramTerms() {
		p := 1.0
		for _, x := range t {
			p *= float64(x)
		}
		n += p
	}
	return n
}
