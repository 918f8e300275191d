package launch

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"trellis/comm"
	"trellis/comm/shm"
)

// Shared memory. Every job attempt gets a fresh name for this node's
// comm/shm world (shm.EnvName, unless Config.Env sets one), so no attempt
// ever maps a segment another left behind; and once every worker of the
// attempt has exited, however they died, the launcher removes the
// segments under that name (the workers remove them themselves once every
// rank has mapped them; a worker killed before that leaves them).

// newShmName is a node's world name for one attempt.
func newShmName(node int) string {
	var b [6]byte
	rand.Read(b[:])
	return fmt.Sprintf("trellis-%s-n%d", hex.EncodeToString(b[:]), node)
}

// envValue is the last KEY=value of key in env, else the launcher's own
// environment's.
func envValue(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v, true
		}
	}
	return os.LookupEnv(key)
}

// shmEnv is the shared-memory name and directory of the attempt: those
// Config.Env gives, else a fresh name, and the directory of the
// environment or shm.DefaultDir.
func (c Config) shmEnv() (name, dir string, extra []string) {
	dir, ok := envValue(c.Env, shm.EnvDir)
	if !ok || dir == "" {
		dir = shm.DefaultDir
	}
	for i := len(c.Env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(c.Env[i], shm.EnvName+"="); ok {
			return v, dir, nil
		}
	}
	name = newShmName(c.NodeRank)
	return name, dir, []string{shm.EnvName + "=" + name}
}

// removeSegments removes the attempt's segments, reporting how many.
func (j *Job) removeSegments() {
	if j.shmName == "" {
		return
	}
	n, _ := shm.RemoveSegments(j.shmDir, j.shmName)
	j.mu.Lock()
	j.segmentsRemoved = n
	j.mu.Unlock()
}

// SegmentsRemoved is how many shared-memory segment files the launcher
// removed after the workers exited (after Wait): those of workers that
// died before every rank had mapped them.
func (j *Job) SegmentsRemoved() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.segmentsRemoved
}

// blamedRank finds the peer a worker's last lines say failed, as comm's
// *PeerError prints it ("comm: allreduce: rank 3 failed: ..."): the rank
// another node's launcher cannot see die, named by the workers here that
// noticed. -1 when the lines name none. closed reports that the line says
// the peer closed its connection in good order (comm.PeerClosedText): a
// peer that gave up on its own, not where the failure began.
func blamedRank(tail []string) (rank int, closed bool) {
	re := regexp.MustCompile(`\brank (\d+) failed\b`)
	for i := len(tail) - 1; i >= 0; i-- {
		if m := re.FindStringSubmatch(tail[i]); m != nil {
			if r, err := strconv.Atoi(m[1]); err == nil {
				return r, strings.Contains(tail[i], comm.PeerClosedText)
			}
		}
	}
	return -1, false
}
