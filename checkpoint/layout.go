package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

const (
	// Version is the index format this package writes and reads.
	Version = 1
	// IndexName is the file written last into a step directory.
	IndexName = "index.json"
	// LatestName is the file in the root naming the newest complete step.
	LatestName = "latest"

	partialSuffix  = ".partial"
	replacedSuffix = ".replaced"
	metaKey        = "trellis.checkpoint" // per-file safetensors metadata
	maxIndexSize   = 256 << 20
	maxWorld       = 1 << 20
)

var (
	stepRE = regexp.MustCompile(`^step-(\d{8,})$`)
	anyRE  = regexp.MustCompile(`^step-(\d{8,})(\.partial|\.replaced)?$`)
)

// StepName is the directory name of a step: step-00000010.
func StepName(step int) string { return fmt.Sprintf("step-%08d", step) }

// RankFileName is a rank's file name: rank-00001-of-00004.safetensors.
func RankFileName(rank, world int) string {
	return fmt.Sprintf("rank-%05d-of-%05d.safetensors", rank, world)
}

// parseStep returns the step of a final step directory name.
func parseStep(name string) (int, bool) {
	m := stepRE.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// writeAtomic writes path through a temporary file in the same directory:
// write, fsync, close, rename, fsync the directory.
func writeAtomic(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a directory's entries (creations, renames) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// sha256Hex is the lower-case hex SHA-256 of b.
func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
