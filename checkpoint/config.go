// Package checkpoint saves and restores sharded training state: every rank
// writes its own tensors (or shards of tensors) and rank 0 commits a global
// index, with no communication inside this package.
//
// Layout of a root directory:
//
//	<dir>/step-00000010/rank-00000-of-00004.safetensors   one file per rank
//	<dir>/step-00000010/index.json                         written last
//	<dir>/latest                                           "step-00000010"
//
// A shard is the range [lo, hi) of the row-major flattening of a global
// tensor; the index records, per tensor, its global shape and dtype and which
// rank holds which range, so a later reader can reshard. It also records the
// size and SHA-256 of every rank file, the plan text, and the caller's JSON
// (model config, data position, RNG seed, optimizer step).
//
// Protocol, for world ranks sharing a filesystem:
//
//  1. every rank calls Store.WriteRank(step, rank, world, shards): its file
//     appears (temp name, fsync, rename) in <dir>/step-N.partial/;
//  2. the caller runs a barrier;
//  3. rank 0 calls Store.Commit, which hashes and checks the rank files,
//     writes index.json, fsyncs, renames step-N.partial to step-N, points
//     latest at it, and prunes old steps beyond Config.Keep.
//
// A crash at any point leaves the earlier checkpoints and latest intact and
// never a partial checkpoint under a final name; leftover .partial
// directories are ignored by readers and removed by the next Commit.
// Open verifies index.json and every file's size and SHA-256 before anything
// is used.
package checkpoint

import "fmt"

// Config is the [checkpoint] section of a job file.
type Config struct {
	// Dir is the root directory of the run's checkpoints.
	Dir string `toml:"dir"`
	// Every saves a checkpoint every this many steps (0: never periodically).
	Every int `toml:"every"`
	// Keep retains the newest Keep checkpoints (0: keep all).
	Keep int `toml:"keep"`
}

// Validate names the bad field and the rule.
func (c Config) Validate() error {
	switch {
	case c.Every < 0:
		return fmt.Errorf("checkpoint: every=%d must be >= 0", c.Every)
	case c.Keep < 0:
		return fmt.Errorf("checkpoint: keep=%d must be >= 0", c.Keep)
	case c.Every > 0 && c.Dir == "":
		return fmt.Errorf("checkpoint: dir must be set when every=%d > 0", c.Every)
	}
	return nil
}

// Due reports whether a checkpoint is due after step (1-based count of
// completed steps) under the periodic schedule.
func (c Config) Due(step int) bool { return c.Every > 0 && step > 0 && step%c.Every == 0 }
