package arch

// FP8 is what an fp8 runner (precision.FP8) holds beyond its bf16 one, in
// elements, for passes of d on a rank's part: the quantised GEMM operands
// as bf16 (package fp8's dequantised values) — two activation-sized ones
// (B·T·w, w the widest input or output of the rank's linear layers: the
// forward's x and the backward's dy, then the weight gradient's dy and x)
// and one weight (the largest out·in) — and Quantise's fp32 scratch (2w);
// and per linear layer of a block the amax histories of its three
// operands (x, W, dy) under delayed scaling, Hist(h)·3·4 fp32 a block.
type FP8 struct {
	Acts, Weight float64 // bf16: 2·B·T·w and max out·in
	Tmp          float64 // fp32: 2w
}

// FP8Workspace is the fp8 scratch of passes of d (the output head stays
// in bf16, as DeepSeek-V3 and Transformer Engine keep it).
func (c Config) FP8Workspace(d Dims) FP8 {
	BT, C := float64(d.B)*float64(d.T), float64(c.Hidden)
	var w, wt float64
	if c.IsLlama() {
		Q, KV, F, _, _ := c.llamaLocal(d.Part)
		W := Q + 2*KV
		w = max(C, W, Q, 2*F)
		wt = C * max(W, Q, 2*F)
	} else {
		Cl, F, _, _ := c.localF(d.Part)
		w = max(C, 3*Cl, F)
		wt = C * max(3*Cl, F)
	}
	return FP8{Acts: 2 * BT * w, Weight: wt, Tmp: 2 * w}
}

// Bytes is what the workspace tag holds for f.
func (f FP8) Bytes() float64 { return 2*(f.Acts+f.Weight) + 4*f.Tmp }

// FP8HistoryBytes is the amax histories of h steps (fp8.Len(h) = h+2
// fp32 each) of blocks blocks' four linear layers' three operands.
func FP8HistoryBytes(blocks, h int) float64 { return float64(blocks) * 4 * 3 * float64(h+2) * 4 }
