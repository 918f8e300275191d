// Package data turns text into the (inputs, targets) token batches a
// language model trains on.
//
// Tokenizers: "byte" (one token per byte, vocabulary 256) and "gpt2"
// (GPT-2's BPE, tiktoken's r50k_base, vocabulary 50257), behind one
// Tokenizer interface.
//
// Sources (Config.Source): "embedded" (Pride and Prejudice, compiled into
// the binary, so the default run needs no files), "synthetic" (uniform
// random tokens from the seed, for benchmarks), a text file (tokenised once,
// cached by content hash and tokenizer) or an llm.c .bin token file.
//
// Splits: the last ValFraction of the tokens is the validation split.
//
// Order: Loader documents it; in short, a run's training samples are
// numbered, sample g is a pure function of (seed, g) through an epoch-keyed
// permutation of fixed-length windows, a run's position is one integer
// (Position), and a data-parallel step's global batch is cut into per-rank,
// per-micro-step slices by Slice.
package data
