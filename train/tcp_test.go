package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
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
// as `trellis launch` does) gives the losses of the goroutine ranks over
// comm/local.
func TestTCPProcessesMatchLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	for _, plan := range []string{"dp=2,zero=3", "dp=2,zero=0", "tp=2,sp=on"} {
		t.Run(plan, func(t *testing.T) {
			j := tinyJob(plan)
			j.Parallel.Backend = "tcp"
			want := runJob(t, tinyJob(plan), "", "", 0).losses
			js, err := json.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			metrics := filepath.Join(t.TempDir(), "metrics.jsonl")
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err = launch.Run(ctx, launch.Config{
				NProcPerNode: 2, Program: os.Args[0], Args: []string{"-test.run=^$"},
				Env:    []string{envWorker + "=1", envJob + "=" + string(js), envMetrics + "=" + metrics},
				Stdout: &out, Stderr: &out,
			})
			if err != nil {
				t.Fatalf("launch: %v\n%s", err, out.String())
			}
			got := readLosses(t, metrics)
			if len(got) != len(want) {
				t.Fatalf("%d steps over tcp, %d over local\n%s", len(got), len(want), out.String())
			}
			for s := range want {
				if math.Abs(got[s]-want[s]) > 1e-5*want[s] {
					t.Errorf("step %d: loss %.9g over tcp, %.9g over local", s+1, got[s], want[s])
				}
			}
		})
	}
}

func readLosses(t *testing.T, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var m metricsLine
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Loss)
	}
	return out
}
