// Package optim updates parameters: AdamW over flat fp32 buffers (or this
// rank's shard of them, for ZeRO), global-norm gradient clipping that can be
// combined across shards, and the learning-rate schedule (linear warmup, then
// cosine decay to a floor).
//
// The optimizer never sees tensors, only a flat parameter slice, its gradient
// slice and the ranges of the global flat buffer that receive weight decay.
// Its moment buffers m and v are allocated through a device.Device with the
// tag device.Optim, so they count as the seed's M_optim (8 bytes per
// parameter in fp32).
package optim
