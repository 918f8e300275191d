// Package model runs the passes of the architectures package arch
// declares, llm.c style: explicit forward and backward passes over flat
// buffers, every kernel call written out, no autograd.
//
// A pass is built from layers, each a small type with a forward, a
// backward for its inputs and a backward for its weights, whose saved
// activations are the ones arch declares for it:
//
//	linear     column-parallel, row-parallel or replicated (linear.go): the
//	           Megatron f/g collectives belong to it, through TPComm
//	norm       LayerNorm, RMSNorm (norm.go)
//	attention  the causal attention core, materialising or flash (attention.go)
//	mlp        GELU between two linears (mlp.go)
//	embedding  vocab-parallel token and learned position embedding (embedding.go)
//	head       the tied vocab-parallel LM head and cross-entropy (head.go)
//
// and an architecture's block is a short sequence of layer calls written
// once (gpt2.go): the same code runs every precision (the layers read
// their weights, save their activations and round their operands in the
// dtypes of one precision.Policy), every tensor-parallel split (a linear
// of degree 1 is a plain dense layer) and both forms of the backward pass
// (whole, or split into input and weight gradients for zero-bubble
// pipelines: the weight-gradient half of each linear is deferred).
//
// The runner (GPT) holds no parameters — a Params hands each unit's
// weights out, already in the policy's compute dtype, and takes its
// gradients — and no activations — a Stash holds one micro-batch's,
// carved from arch's declarations — so a pipeline can keep several
// micro-batches in flight and a strategy can gather, shard and reduce per
// unit. It owns the backward scratch (workspace), so one runner runs one
// pass at a time.
package model
