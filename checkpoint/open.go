package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"trellis/safetensors"
)

// Checkpoint is a verified step directory. Open reads and verifies every
// rank file once and keeps its decoded shards (memory linear in the
// checkpoint's size); reads are served from them, so a change to the
// files after Open is never seen. It is safe for concurrent readers.
type Checkpoint struct {
	dir   string
	ix    *Index
	ranks [][]Shard // per rank, sorted by name
	held  []map[string]int
	files []rankFile // OpenRanges: read shards on demand (ranks, held nil)
}

// Latest returns the step directory that root's latest file names.
func Latest(root string) (string, error) {
	path := filepath.Join(root, LatestName)
	b, err := readBounded(path, 4096)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	name := string(bytes.TrimSpace(b))
	if _, ok := parseStep(name); !ok {
		return "", fmt.Errorf("checkpoint: %s: %q is not a step directory name", path, name)
	}
	return filepath.Join(root, name), nil
}

// Open accepts a step directory, or a root whose latest names one, and
// verifies index.json and the size and SHA-256 of every rank file before
// returning; each file is read once.
func Open(path string) (*Checkpoint, error) {
	dir, indexPath, ix, err := readIndex(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{dir: dir, ix: ix}
	var files int64
	for _, fe := range ix.Files {
		shards, err := loadRank(dir, fe, ix)
		if err != nil {
			return nil, err
		}
		held := make(map[string]int, len(shards))
		for i, sh := range shards {
			held[sh.Name] = i
		}
		c.ranks, c.held = append(c.ranks, shards), append(c.held, held)
		files += fe.Size
	}
	if ix.dataBytes() > files {
		return nil, fmt.Errorf("checkpoint: %s: its tensors need %d bytes, its files hold %d", indexPath, ix.dataBytes(), files)
	}
	if err := ix.checkBoxes(); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", indexPath, err)
	}
	return c, nil
}

// loadRank reads a rank file once, checks its size and SHA-256 against
// its entry and decodes its shards.
func loadRank(dir string, fe FileEntry, ix *Index) ([]Shard, error) {
	path := filepath.Join(dir, fe.Name)
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: %s: missing", path)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if st.Size() != fe.Size {
		return nil, fmt.Errorf("checkpoint: %s: size %d bytes, %s says %d", path, st.Size(), IndexName, fe.Size)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if int64(len(b)) != fe.Size || sha256Hex(b) != fe.SHA256 {
		return nil, fmt.Errorf("checkpoint: %s: checksum mismatch", path)
	}
	f, err := safetensors.Parse(path, b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	shards, err := decodeRank(f, ix.Step, fe.Rank, ix.World)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return shards, nil
}

// resolve maps a root to its latest step directory; a step directory (one
// holding index.json) is returned as is.
func resolve(path string) (string, error) {
	if _, err := os.Stat(filepath.Join(path, IndexName)); err == nil {
		return path, nil
	}
	if _, err := os.Stat(filepath.Join(path, LatestName)); err == nil {
		dir, err := Latest(path)
		if err != nil {
			return "", err
		}
		// A crash while replacing a step of the same number leaves the
		// complete older copy under the .replaced name.
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if _, err := os.Stat(filepath.Join(dir+replacedSuffix, IndexName)); err == nil {
				return dir + replacedSuffix, nil
			}
		}
		return dir, nil
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	return "", fmt.Errorf("checkpoint: %s: not a checkpoint (neither %s nor %s)", path, IndexName, LatestName)
}

// readBounded reads a small file, refusing one larger than limit.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}

// Dir is the step directory.
func (c *Checkpoint) Dir() string { return c.dir }

// Index is the decoded index.json; treat it as read-only.
func (c *Checkpoint) Index() *Index { return c.ix }

// Step is the number of completed steps the checkpoint holds.
func (c *Checkpoint) Step() int { return c.ix.Step }

// World is the number of ranks that wrote it.
func (c *Checkpoint) World() int { return c.ix.World }

// Plan is the plan text it was saved under.
func (c *Checkpoint) Plan() string { return c.ix.Plan }

// Meta is the caller's JSON as committed (nil if none).
func (c *Checkpoint) Meta() json.RawMessage { return c.ix.Meta }

// DecodeMeta unmarshals the caller's JSON into dst.
func (c *Checkpoint) DecodeMeta(dst any) error {
	if c.ix.Meta == nil {
		return fmt.Errorf("checkpoint: %s: no caller metadata", c.dir)
	}
	if err := json.Unmarshal(c.ix.Meta, dst); err != nil {
		return fmt.Errorf("checkpoint: %s: meta: %w", filepath.Join(c.dir, IndexName), err)
	}
	return nil
}

// RequireSamePlan returns nil when the run's plan and world equal the
// checkpoint's, and otherwise an error naming both plans, for a caller that
// needs the writer's layout (trellis train reshards instead: ReadElems).
func (c *Checkpoint) RequireSamePlan(plan string, world int) error {
	if c.ix.Plan == plan && c.ix.World == world {
		return nil
	}
	return fmt.Errorf("checkpoint: %s was saved under plan %q (world %d), but this run uses plan %q (world %d): this needs the same plan",
		c.dir, c.ix.Plan, c.ix.World, plan, world)
}

// ReadRank returns the shards rank wrote, sorted by name (as verified by
// Open; the data is shared, treat it as read-only). Under OpenRanges it
// reads and verifies them.
func (c *Checkpoint) ReadRank(rank int) ([]Shard, error) {
	if rank < 0 || rank >= c.ix.World {
		return nil, fmt.Errorf("checkpoint: %s: rank %d not in world %d", c.dir, rank, c.ix.World)
	}
	if c.files == nil {
		return slices.Clone(c.ranks[rank]), nil
	}
	var out []Shard
	for name, t := range c.ix.Tensors {
		for _, se := range t.Shards {
			if se.Rank == rank {
				s, err := c.readShard(name, t, se)
				if err != nil {
					return nil, err
				}
				out = append(out, s)
			}
		}
	}
	slices.SortFunc(out, func(a, b Shard) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ReadTensor assembles the whole named tensor from the ranks that hold it.
func (c *Checkpoint) ReadTensor(name string) (Shard, error) {
	t, ok := c.ix.Tensors[name]
	if !ok {
		return Shard{}, fmt.Errorf("checkpoint: %s: no tensor %q", c.dir, name)
	}
	n, _ := numel(t.Shape) // validated by DecodeIndex
	return c.ReadElems(name, 0, n)
}

// shard is rank se.Rank's shard of the named tensor, as the index says,
// from the files Open read (OpenRanges streams shards: readShardInto).
func (c *Checkpoint) shard(name string, t TensorEntry, se ShardEntry) (Shard, error) {
	i, ok := c.held[se.Rank][name]
	var s Shard
	if ok {
		s = c.ranks[se.Rank][i]
	}
	if !ok || s.Lo != se.Lo || s.Hi != se.Hi || s.DType != t.DType || !slices.Equal(s.Shape, t.Shape) || !sameSlice(s.Slice, se.Slice) {
		return Shard{}, fmt.Errorf("checkpoint: %s: rank %d's file does not hold [%d, %d) of %q as the index says", c.dir, se.Rank, se.Lo, se.Hi, name)
	}
	return s, nil
}

// sameSlice compares two optional boxes.
func sameSlice(a, b *Slice) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.Equal(a.View, b.View) && slices.Equal(a.Off, b.Off) && slices.Equal(a.Ext, b.Ext)
}

// readIndex resolves path to a step directory and reads and validates its
// index, which must hold the step the directory is named for.
func readIndex(path string) (dir, indexPath string, ix *Index, err error) {
	if dir, err = resolve(path); err != nil {
		return "", "", nil, err
	}
	indexPath = filepath.Join(dir, IndexName)
	b, err := readBounded(indexPath, maxIndexSize)
	if err != nil {
		return "", "", nil, fmt.Errorf("checkpoint: %w", err)
	}
	if ix, err = DecodeIndex(b); err != nil {
		return "", "", nil, fmt.Errorf("checkpoint: %s: %w", indexPath, err)
	}
	if n, ok := parseStep(filepath.Base(dir)); ok && n != ix.Step {
		return "", "", nil, fmt.Errorf("checkpoint: %s: holds step %d, but the directory is named for step %d", indexPath, ix.Step, n)
	}
	return dir, indexPath, ix, nil
}
