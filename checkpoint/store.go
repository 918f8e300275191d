package checkpoint

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"trellis/safetensors"
)

// Store writes checkpoints under Config.Dir.
type Store struct {
	cfg Config
}

// New returns a Store for cfg; cfg.Dir must be set.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		return nil, errors.New("checkpoint: dir must be set")
	}
	return &Store{cfg: cfg}, nil
}

// Config returns the store's configuration.
func (s *Store) Config() Config { return s.cfg }

// StepDir is the final directory of step.
func (s *Store) StepDir(step int) string { return filepath.Join(s.cfg.Dir, StepName(step)) }

func (s *Store) partialDir(step int) string { return s.StepDir(step) + partialSuffix }

// WriteRank writes this rank's shards of step into the step's partial
// directory (temp file, fsync, rename). Every rank of world calls it before
// the barrier that precedes Commit.
func (s *Store) WriteRank(step, rank, world int, shards []Shard) error {
	if step < 0 || world < 1 || world > maxWorld || rank < 0 || rank >= world {
		return fmt.Errorf("checkpoint: WriteRank(step %d, rank %d, world %d): want step >= 0 and 0 <= rank < world", step, rank, world)
	}
	ts, meta, err := encodeRank(step, rank, world, shards)
	if err != nil {
		return fmt.Errorf("checkpoint: rank %d: %w", rank, err)
	}
	dir := s.partialDir(step)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	path := filepath.Join(dir, RankFileName(rank, world))
	err = writeAtomic(path, func(w io.Writer) error { return safetensors.Write(w, ts, meta) })
	if err != nil {
		return fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return nil
}

// Manifest is what rank 0 adds at commit time.
type Manifest struct {
	Step  int
	World int
	// Plan is the canonical plan text the ranks ran under.
	Plan string
	// Meta is the caller's JSON: model config, data position, RNG seed,
	// optimizer step. Nil is allowed.
	Meta json.RawMessage
}

// Commit turns the step's partial directory into a complete checkpoint:
// it hashes and checks every rank file, writes index.json, renames the
// directory to its final name, updates latest and prunes beyond Keep. It
// returns the final directory. Call it on one rank after all WriteRanks.
func (s *Store) Commit(m Manifest) (string, error) {
	if m.Meta != nil && !json.Valid(m.Meta) {
		return "", errors.New("checkpoint: Manifest.Meta is not valid JSON")
	}
	// Checked at every save: the run that claimed the root still holds
	// it (lock.go), so no second writer publishes, re-points latest or
	// prunes.
	if err := CheckHeld(s.cfg.Dir); err != nil {
		return "", err
	}
	partial, final := s.partialDir(m.Step), s.StepDir(m.Step)
	ix, err := buildIndex(partial, m)
	if err != nil {
		return "", err
	}
	if err := removeStrays(partial, ix); err != nil {
		return "", err
	}
	b, err := encodeIndex(ix)
	if err != nil {
		return "", fmt.Errorf("checkpoint: index: %w", err)
	}
	indexPath := filepath.Join(partial, IndexName)
	if err := writeAtomic(indexPath, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		return "", fmt.Errorf("checkpoint: %s: %w", indexPath, err)
	}
	if err := s.publish(partial, final); err != nil {
		return "", err
	}
	latest := filepath.Join(s.cfg.Dir, LatestName)
	err = writeAtomic(latest, func(w io.Writer) error { _, err := io.WriteString(w, StepName(m.Step)+"\n"); return err })
	if err != nil {
		return "", fmt.Errorf("checkpoint: %s: %w", latest, err)
	}
	return final, s.prune(m.Step)
}

// buildIndex reads every expected rank file of the partial directory and
// assembles the global index, checking that the shards tile every tensor.
func buildIndex(partial string, m Manifest) (*Index, error) {
	if m.Step < 0 || m.World < 1 || m.World > maxWorld {
		return nil, fmt.Errorf("checkpoint: commit of step %d with world %d: want step >= 0 and world >= 1", m.Step, m.World)
	}
	ix := &Index{Version: Version, Step: m.Step, World: m.World, Plan: m.Plan, Meta: m.Meta, Tensors: map[string]TensorEntry{}}
	for r := 0; r < m.World; r++ {
		path := filepath.Join(partial, RankFileName(r, m.World))
		fe, shards, sums, err := readRankFile(path, m.Step, r, m.World)
		if err != nil {
			return nil, err
		}
		ix.Files = append(ix.Files, fe)
		for i, sh := range shards {
			if err := addShard(ix.Tensors, r, sh, sums[i]); err != nil {
				return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
			}
		}
	}
	for name, t := range ix.Tensors {
		sort.SliceStable(t.Shards, func(i, j int) bool { return t.Shards[i].Lo < t.Shards[j].Lo })
		ix.Tensors[name] = t
	}
	if err := ix.validate(); err != nil {
		return nil, fmt.Errorf("checkpoint: step %d: %w", m.Step, err)
	}
	if err := ix.checkBoxes(); err != nil { // the shards came from the files just read
		return nil, fmt.Errorf("checkpoint: step %d: %w", m.Step, err)
	}
	return ix, nil
}

// readRankFile streams a rank file once: it checks its header and
// per-file record, and hashes the whole file and each shard's bytes,
// holding no more than the header and a buffer (rank 0 never holds
// another rank's file in memory). The shards come back without data.
func readRankFile(path string, step, rank, world int) (FileEntry, []Shard, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileEntry{}, nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return FileEntry{}, nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	head, err := readHeader(f, st.Size())
	if err != nil {
		return FileEntry{}, nil, nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	h, data, err := safetensors.ParseHeader(head, st.Size())
	if err != nil {
		return FileEntry{}, nil, nil, fmt.Errorf("checkpoint: safetensors: %s: %w", path, err)
	}
	shards, err := recordShards(h.Metadata, h.Tensors, step, rank, world)
	if err != nil {
		return FileEntry{}, nil, nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	// The tensors tile the data section (ParseHeader checks it): hash them
	// in file order, each into its own hash and the file's.
	order := slices.Clone(h.Tensors)
	slices.SortFunc(order, func(a, b safetensors.Info) int { return cmp.Compare(a.Begin, b.Begin) })
	file := sha256.New()
	file.Write(head)
	r := bufio.NewReaderSize(io.NewSectionReader(f, data, st.Size()-data), 1<<20)
	sums := map[string]string{}
	for _, info := range order {
		one := sha256.New()
		if _, err := io.CopyN(io.MultiWriter(file, one), r, info.End-info.Begin); err != nil {
			return FileEntry{}, nil, nil, fmt.Errorf("checkpoint: %s: tensor %q: %w", path, info.Name, err)
		}
		sums[info.Name] = hex.EncodeToString(one.Sum(nil))
	}
	perShard := make([]string, len(shards))
	for i, sh := range shards {
		perShard[i] = sums[sh.Name]
	}
	fe := FileEntry{Name: filepath.Base(path), Rank: rank, Size: st.Size(), SHA256: hex.EncodeToString(file.Sum(nil))}
	return fe, shards, perShard, nil
}

// addShard records that rank holds sh, whose bytes hash to sum, checking shape and dtype agree with
// the other ranks' shards of the same tensor.
func addShard(ts map[string]TensorEntry, rank int, sh Shard, sum string) error {
	t, ok := ts[sh.Name]
	if !ok {
		t = TensorEntry{Shape: append([]int{}, sh.Shape...), DType: sh.DType}
	} else if !slices.Equal(t.Shape, sh.Shape) || t.DType != sh.DType {
		return fmt.Errorf("tensor %q is %s %v here but %s %v on rank %d", sh.Name, sh.DType, sh.Shape, t.DType, t.Shape, t.Shards[0].Rank)
	}
	t.Shards = append(t.Shards, ShardEntry{Rank: rank, Slice: sh.Slice, Lo: sh.Lo, Hi: sh.Hi, SHA256: sum})
	ts[sh.Name] = t
	return nil
}

// removeStrays deletes everything in the partial directory that is not a
// rank file of this commit: temp files of crashed writers, files of an
// earlier attempt with another world size, an old index.
func removeStrays(partial string, ix *Index) error {
	keep := map[string]bool{}
	for _, f := range ix.Files {
		keep[f.Name] = true
	}
	entries, err := os.ReadDir(partial)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, e := range entries {
		if !keep[e.Name()] {
			if err := os.RemoveAll(filepath.Join(partial, e.Name())); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
	}
	return nil
}

// publish renames partial to final. An existing final directory of the same
// step is first moved aside and removed after the rename.
func (s *Store) publish(partial, final string) error {
	old := final + replacedSuffix
	if _, err := os.Stat(final); err == nil {
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if err := os.Rename(final, old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := os.Rename(partial, final); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(s.cfg.Dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// prune removes leftovers of older steps (partial or replaced directories)
// and, with Keep > 0, complete steps beyond the newest Keep. It never
// removes the step just committed.
func (s *Store) prune(current int) error {
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var steps []int
	for _, e := range entries {
		m := anyRE.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		if m[2] != "" { // .partial or .replaced
			if n, ok := parseStep("step-" + m[1]); ok && n < current {
				os.RemoveAll(filepath.Join(s.cfg.Dir, e.Name()))
			}
			continue
		}
		if n, ok := parseStep(e.Name()); ok {
			steps = append(steps, n)
		}
	}
	if s.cfg.Keep <= 0 || len(steps) <= s.cfg.Keep {
		return nil
	}
	sort.Sort(sort.Reverse(sort.IntSlice(steps)))
	for _, n := range steps[s.cfg.Keep:] {
		if n == current {
			continue
		}
		if err := os.RemoveAll(s.StepDir(n)); err != nil {
			return fmt.Errorf("checkpoint: prune: %w", err)
		}
	}
	return nil
}
