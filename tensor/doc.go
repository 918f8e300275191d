// Package tensor holds the element types Trellis moves around and their
// conversions: fp32 (the storage and accumulation type of the engine), and the
// 16-bit formats bf16 and fp16 used for communication and, later, mixed
// precision.
//
// Conversions from fp32 round to nearest, ties to even; NaN stays NaN (quiet,
// sign kept) and ±Inf stays ±Inf. Overflow rounds to ±Inf as IEEE 754 requires.
package tensor
