package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"
)

// Exit is how one worker ended.
type Exit struct {
	Rank    int
	Status  string    // "exit status 0", "exit status 1", "signal: killed", ...
	Code    int       // exit code, -1 when killed by a signal
	At      time.Time // when the launcher saw it end
	Stopped bool      // the launcher had signalled it first
}

// Failed reports a non-zero exit or death by signal.
func (e Exit) Failed() bool { return e.Code != 0 }

// Job is a running set of workers.
type Job struct {
	cfg     Config
	workers []*worker
	exits   chan Exit
	done    chan struct{}

	mu          sync.Mutex
	results     []Exit
	first       *Exit
	interrupted error

	shmName, shmDir string // this attempt's shared-memory world (shm.go)
	segmentsRemoved int
}

type worker struct {
	rank     int
	cmd      *exec.Cmd
	tail     *tail
	signaled bool // guarded by Job.mu
	exited   bool // guarded by Job.mu
}

// Start validates cfg and starts the workers of this node. If one cannot
// be started, those already started are killed.
func Start(ctx context.Context, cfg Config) (*Job, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	j := &Job{cfg: cfg, exits: make(chan Exit, cfg.NProcPerNode), done: make(chan struct{})}
	var extra []string
	j.shmName, j.shmDir, extra = cfg.shmEnv()
	j.cfg.Env = append(append([]string(nil), cfg.Env...), extra...)
	out, errw := &lineWriter{w: cfg.Stdout}, &lineWriter{w: cfg.Stderr}
	for lr := 0; lr < cfg.NProcPerNode; lr++ {
		w, err := j.startWorker(lr, out, errw)
		if err != nil {
			for _, w := range j.workers {
				w.cmd.Process.Kill()
			}
			j.removeSegments()
			return nil, err
		}
		j.workers = append(j.workers, w)
	}
	go j.supervise(ctx)
	return j, nil
}

func (j *Job) startWorker(lr int, out, errw *lineWriter) (*worker, error) {
	c := j.cfg
	w := &worker{rank: c.NodeRank*c.NProcPerNode + lr, tail: &tail{n: c.TailLines}}
	w.cmd = exec.Command(c.Program, c.Args...)
	w.cmd.Env = c.workerEnv(lr)
	w.cmd.SysProcAttr = sysProcAttr()
	prefix := fmt.Sprintf("[rank %d] ", w.rank)
	var copying sync.WaitGroup
	pipe := func(to *lineWriter) (*os.File, error) {
		r, wr, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("launch: rank %d: %w", w.rank, err)
		}
		copying.Add(1)
		go func() {
			defer copying.Done()
			defer r.Close()
			var watch func(string)
			if c.Watch != nil {
				watch = func(line string) { c.Watch(w.rank, line) }
			}
			copyLines(r, prefix, to, w.tail, watch, c.MaxLine)
		}()
		return wr, nil
	}
	stdout, err := pipe(out)
	if err != nil {
		return nil, err
	}
	defer stdout.Close() // the child holds its own copy
	stderr, err := pipe(errw)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	w.cmd.Stdout, w.cmd.Stderr = stdout, stderr
	if err := w.cmd.Start(); err != nil {
		stdout.Close()
		stderr.Close()
		copying.Wait()
		return nil, fmt.Errorf("launch: start rank %d (%s): %w", w.rank, c.Program, err)
	}
	go func() {
		err := w.cmd.Wait()
		waitTimeout(&copying, time.Second) // the rest of its output, unless a grandchild holds the pipe
		j.exits <- exitOf(w.rank, err)
	}()
	return w, nil
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

func exitOf(rank int, err error) Exit {
	e := Exit{Rank: rank, Status: "exit status 0", At: time.Now()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		e.Status, e.Code = ee.ProcessState.String(), ee.ExitCode()
	default:
		e.Status, e.Code = err.Error(), -1
	}
	return e
}

// supervise collects exits; after the first failure it stops the rest:
// SIGTERM after StopGrace, SIGKILL one StopGrace later. On cancellation it
// forwards one SIGINT to every worker at once, and SIGTERM after
// InterruptGrace.
func (j *Job) supervise(ctx context.Context) {
	defer close(j.done)
	defer j.removeSegments() // every worker has exited
	var term, kill <-chan time.Time
	ctxDone := ctx.Done()
	for left := len(j.workers); left > 0; {
		select {
		case e := <-j.exits:
			left--
			j.record(e)
			if e.Failed() && term == nil && kill == nil {
				term = time.After(j.cfg.StopGrace)
			}
		case <-ctxDone:
			ctxDone = nil
			j.mu.Lock()
			j.interrupted = ctx.Err()
			j.mu.Unlock()
			j.signalAll(syscall.SIGINT)
			term, kill = time.After(j.cfg.InterruptGrace), nil
		case <-term:
			term = nil
			j.signalAll(syscall.SIGTERM)
			kill = time.After(j.cfg.StopGrace)
		case <-kill:
			kill = nil
			j.signalAll(syscall.SIGKILL)
		}
	}
}

func (j *Job) record(e Exit) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, w := range j.workers {
		if w.rank == e.Rank {
			w.exited = true
			e.Stopped = w.signaled
		}
	}
	j.results = append(j.results, e)
	// The root cause: the first worker that failed on its own, except that
	// a death by signal (kill -9, the OOM killer) outranks exits with a
	// status, which are usually the other workers noticing it.
	if e.Failed() && !e.Stopped && (j.first == nil || e.Code == -1 && j.first.Code != -1) {
		j.first = &e
	}
}

// Abort kills every worker still running (a second Ctrl-C).
func (j *Job) Abort() { j.signalAll(syscall.SIGKILL) }

// signalAll signals every worker still running.
func (j *Job) signalAll(sig os.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, w := range j.workers {
		if !w.exited {
			w.signaled = true
			w.cmd.Process.Signal(sig)
		}
	}
}

// Pids are the workers' process ids, by local rank.
func (j *Job) Pids() []int {
	pids := make([]int, len(j.workers))
	for i, w := range j.workers {
		pids[i] = w.cmd.Process.Pid
	}
	return pids
}

// Wait waits for every worker. It returns nil when all exited with status
// 0, a *WorkerError for the first that failed on its own, or an error
// matching ErrInterrupted when the context was cancelled.
func (j *Job) Wait() error {
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	var stopped []int
	var also []string
	for _, e := range j.results {
		if e.Stopped {
			stopped = append(stopped, e.Rank)
		} else if e.Failed() && e.Rank != j.firstRank() {
			also = append(also, fmt.Sprintf("rank %d (%s)", e.Rank, e.Status))
		}
	}
	sort.Ints(stopped)
	switch {
	case j.first != nil:
		t := j.tailOf(j.first.Rank)
		return &WorkerError{Rank: j.first.Rank, Status: j.first.Status, Code: j.first.Code, Tail: t, Stopped: stopped, AlsoFailed: also,
			Blames: j.blame(t), PerNode: j.cfg.NProcPerNode}
	case j.interrupted != nil:
		return fmt.Errorf("%w (%v): stopped ranks %v", ErrInterrupted, j.interrupted, stopped)
	}
	return nil
}

// blame is the rank the first failed worker's last lines (t) lead to
// (rootBlame). Where they name a peer that closed its connection in good
// order — alive, it gave up on its own, most often because it lost a
// peer itself — another worker of this node that names a peer lost
// otherwise (a death, a timeout) names the rank where the failure began,
// and that rank is taken: two workers of a node in collectives with two
// ranks of another node, one of which died and whose node-mate then
// closed, race to fail first, and the launcher names the dead rank
// whichever wins. Called with j.mu held.
func (j *Job) blame(t []string) int {
	b, closed := blamedRank(t)
	if !closed {
		return j.rootBlame(j.first.Rank, b)
	}
	for _, e := range j.results {
		if e.Rank == j.first.Rank {
			continue
		}
		if o, oc := blamedRank(j.tailOf(e.Rank)); o >= 0 && !oc {
			return j.rootBlame(e.Rank, o)
		}
	}
	return j.rootBlame(j.first.Rank, b)
}

// rootBlame follows a chain of blame through this node's workers: when
// the first failed worker names (blame) another worker of this node,
// whose own last lines name a third rank, the failure began there — a
// worker that saw its node-mate close the group after the node-mate lost
// a peer on another node names the node-mate, and the launcher should
// name the peer. It stops at a rank of another node, at a worker that
// names nobody, and at a rank seen before. Called with j.mu held.
func (j *Job) rootBlame(first, blame int) int {
	seen := map[int]bool{first: true}
	for blame >= 0 && !seen[blame] {
		seen[blame] = true
		next, _ := blamedRank(j.tailOf(blame))
		if next < 0 || seen[next] {
			return blame
		}
		blame = next
	}
	return blame
}

// tailOf is the last lines of this node's worker of the given rank (none
// for a rank of another node).
func (j *Job) tailOf(rank int) []string {
	for _, w := range j.workers {
		if w.rank == rank {
			return w.tail.get()
		}
	}
	return nil
}

func (j *Job) firstRank() int {
	if j.first == nil {
		return -1
	}
	return j.first.Rank
}

// Exits lists how every worker ended, in the order they did (after Wait).
func (j *Job) Exits() []Exit {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Exit(nil), j.results...)
}
