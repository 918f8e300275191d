// Package ops holds Trellis's kernels as Forward/Backward pairs over flat,
// row-major fp32 slices, in the manner of llm.c.
//
// Dimension names, used in every shape comment:
//
//	B   micro-batch size (sequences)
//	T   sequence length (tokens per sequence)
//	C   channels (hidden size, d_model)
//	NH  attention heads; HS = C/NH is the head size
//	V   vocabulary size
//	L   layers
//	OC  output channels of a linear layer
//
// Conventions: XxxForward writes its outputs (it never accumulates);
// XxxBackward ACCUMULATES into the gradients of its inputs and parameters
// (dinp += ..., dweight += ...), so gradients flowing into one tensor from
// several consumers, and over micro-batches, sum without extra copies. Each
// backward says so in its doc comment.
//
// Kernels that parallelise take a *Kernels, which carries the thread count
// and the matmul implementation chosen for this CPU.
package ops
