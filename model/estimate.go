package model

// Estimates of what a model runner allocates, from formulas alone, in
// float64 so that no configuration overflows them: a caller compares them
// with a budget or the machine's memory before anything is allocated (and
// before Layout, which is itself O(L), is built for an absurd L).

// ParamCount is NumParams as a float64 for any Config with non-negative
// fields, valid or not: V·C + T·C + L·(12C² + 13C) + 2C.
func (c Config) ParamCount() float64 {
	C, L := float64(c.Hidden), float64(c.Layers)
	return float64(c.Vocab)*C + float64(c.SeqLen)*C + L*(12*C*C+13*C) + 2*C
}

// StashFloatCount is stashFloats for micro-batch B, in float64:
//
//	(L+1)·BTC + L·(15·BTC + 4·BT + B·NH·T²) + BTC + 2·BT + BTV + BT
func (c Config) StashFloatCount(B int) float64 {
	b, T, C, L := float64(B), float64(c.SeqLen), float64(c.Hidden), float64(c.Layers)
	BT, BTC := b*T, b*T*C
	return (L+1)*BTC + L*(15*BTC+4*BT+b*float64(c.Heads)*T*T) + BTC + 2*BT + BT*float64(c.Vocab) + BT
}

// WorkspaceFloatCount is the backward scratch New allocates for
// micro-batch B when attention runs on attnWorkers goroutines
// (max(1, min(threads, B·NH)), see ops.AttentionScratchSize):
//
//	2·BTC + max(BTV, 8·BTC) + attnWorkers·T² (+ BTC with dropout)
func (c Config) WorkspaceFloatCount(B, attnWorkers int) float64 {
	b, T, C := float64(B), float64(c.SeqLen), float64(c.Hidden)
	BTC := b * T * C
	n := 2*BTC + max(b*T*float64(c.Vocab), 8*BTC) + float64(max(1, attnWorkers))*T*T
	if c.Dropout > 0 {
		n += BTC
	}
	return n
}

// RunnerBytes is what New and one NewStash charge to a device for
// micro-batch B: 4 bytes per workspace and stash float plus the stash's
// two (B,T) int32 token arrays. It equals WorkspaceBytes() + StashBytes()
// of the runner it describes.
func (c Config) RunnerBytes(B, attnWorkers int) float64 {
	return 4*(c.WorkspaceFloatCount(B, attnWorkers)+c.StashFloatCount(B)) + 8*float64(B)*float64(c.SeqLen)
}
