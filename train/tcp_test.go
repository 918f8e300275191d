package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"trellis/comm/tcp"
	"trellis/launch"
)

// Environment of a worker process started by TestTCPProcessesMatchLocal.
const (
	envWorker  = "TRELLIS_TRAIN_TEST_WORKER"
	envJob     = "TRELLIS_TRAIN_TEST_JOB"
	envMetrics = "TRELLIS_TRAIN_TEST_METRICS"
	envTrace   = "TRELLIS_TRAIN_TEST_TRACE"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		if err := worker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// worker is one rank of a job launched as processes: it joins the TCP
// world from the launcher's environment and trains its rank.
func worker() error {
	var j Job
	if err := json.Unmarshal([]byte(os.Getenv(envJob)), &j); err != nil {
		return err
	}
	env, err := launch.WorkerEnv()
	if err != nil {
		return err
	}
	cfg, err := env.TCPConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	world, err := tcp.New(cfg)
	if err != nil {
		return err
	}
	defer world.Close()
	o := Options{Job: j, World: world, Trace: os.Getenv(envTrace)}
	if world.Rank() == 0 {
		f, err := os.Create(os.Getenv(envMetrics))
		if err != nil {
			return err
		}
		defer f.Close()
		o.Metrics = f
	}
	_, err = Run(context.Background(), o)
	return err
}

// The same plan run as processes over comm/tcp (started by package launch,
// as `trellis launch` does) gives the losses and gradient norms of the
// goroutine ranks over comm/local bit for bit. dp=4,zero=3 on a model whose
// buckets are too large for tcp's direct exchanges runs 12 steps: its
// reduce-scatters take the large-message path over p = 4 ranks, which must
// still fold in rank order (a ring's rotated order was an ulp off in the
// norms at every step and in the loss by step 6).
func TestTCPProcessesMatchLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	wide := func(plan string) Job {
		j := tinyJob(plan)
		j.Model.Hidden, j.Parallel.BucketSize, j.Train.Steps = 64, "1MiB", 12
		return j
	}
	for _, c := range []struct {
		plan  string
		procs int
		job   func(string) Job
	}{
		{"dp=2,zero=3", 2, tinyJob},
		{"dp=2,zero=0", 2, tinyJob},
		{"tp=2,sp=on", 2, tinyJob},
		{"cp=2,flash=on", 2, tinyJob},                // the ring's point-to-point blocks between processes
		{"cp=2,flash=on,precision=bf16", 2, tinyJob}, // … its keys and values in 16 bits
		{"dp=4,zero=3", 4, wide},
	} {
		t.Run(c.plan, func(t *testing.T) {
			j := c.job(c.plan)
			j.Parallel.Backend = "tcp"
			want := runJob(t, c.job(c.plan), "", "", 0)
			js, err := json.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			metrics := filepath.Join(t.TempDir(), "metrics.jsonl")
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err = launch.Run(ctx, launch.Config{
				NProcPerNode: c.procs, Program: os.Args[0], Args: []string{"-test.run=^$"},
				Env:    []string{envWorker + "=1", envJob + "=" + string(js), envMetrics + "=" + metrics},
				Stdout: &out, Stderr: &out,
			})
			if err != nil {
				t.Fatalf("launch: %v\n%s", err, out.String())
			}
			got, norms := readMetrics(t, metrics)
			if len(got) != len(want.losses) {
				t.Fatalf("%d steps over tcp, %d over local\n%s", len(got), len(want.losses), out.String())
			}
			for s := range want.losses {
				if got[s] != want.losses[s] || norms[s] != want.norms[s] {
					t.Errorf("step %d: loss %v, norm %v over tcp; %v, %v over local", s+1, got[s], norms[s], want.losses[s], want.norms[s])
				}
			}
		})
	}
}

func readLosses(t *testing.T, path string) []float64 {
	t.Helper()
	losses, _ := readMetrics(t, path)
	return losses
}

// readMetrics is the losses and gradient norms of a metrics file's steps.
func readMetrics(t *testing.T, path string) (losses, norms []float64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var m metricsLine
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		losses, norms = append(losses, m.Loss), append(norms, m.GradNorm)
	}
	return losses, norms
}
