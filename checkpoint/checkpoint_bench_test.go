package checkpoint

import (
	"fmt"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSaveOpen saves 4 ranks × 8 MiB of fp32 shards (written by four
// goroutines, committed by one) and opens the result with full verification;
// it reports the checkpoint bytes per second of each phase.
func BenchmarkSaveOpen(b *testing.B) {
	const world, perRank = 4, 2 << 20 // elements
	vals := make([]float32, perRank)
	for i := range vals {
		vals[i] = float32(i)
	}
	shape := []int{world * perRank}
	s, err := New(Config{Dir: b.TempDir(), Keep: 1})
	if err != nil {
		b.Fatal(err)
	}
	var saveNs, openNs int64
	for i := 0; i < b.N; i++ {
		t0 := nowNs()
		done := make(chan error, world)
		for r := 0; r < world; r++ {
			go func(r int) {
				done <- s.WriteRank(i, r, world, []Shard{Float32Shard("flat", shape, int64(r*perRank), vals)})
			}(r)
		}
		for r := 0; r < world; r++ {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s.Commit(Manifest{Step: i, World: world}); err != nil {
			b.Fatal(err)
		}
		t1 := nowNs()
		if _, err := Open(s.Config().Dir); err != nil {
			b.Fatal(err)
		}
		saveNs += t1 - t0
		openNs += nowNs() - t1
	}
	bytes := float64(world*perRank*4) * float64(b.N)
	b.ReportMetric(bytes/float64(saveNs)*1e3, "save_MB/s")
	b.ReportMetric(bytes/float64(openNs)*1e3, "open_MB/s")
}

func nowNs() int64 { return time.Now().UnixNano() }

// cpuNs is the process's user and system CPU time so far (the work done,
// which a loaded machine's waiting does not inflate).
func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkRestore measures a resharding restore: a checkpoint of 4 ranks
// (each holding a contiguous quarter of 8 tensors) opened for partial reads
// (OpenRanges) and read back by 3 concurrent readers, each asking for its
// third of every tensor (ReadElems: the shards that overlap it, read by
// byte range and verified), at 1× (8 MiB) and 10× the size, alternately.
// It reports MB/s of each and the median over iterations of the time
// ratio, which linear restore keeps near 10 (the target is ≤ 12).
func BenchmarkRestore(b *testing.B) {
	const base = 1 << 18 // elements per tensor at 1×
	small, large := restoreCheckpoint(b, base), restoreCheckpoint(b, 10*base)
	var ns [2]int64
	ratios, cpu := make([]float64, 0, b.N), make([]float64, 0, b.N)
	for i := 0; i < b.N; i++ {
		t0, c0 := nowNs(), cpuNs()
		restore(b, small, base)
		t1, c1 := nowNs(), cpuNs()
		restore(b, large, 10*base)
		t2, c2 := nowNs(), cpuNs()
		ns[0], ns[1] = ns[0]+t1-t0, ns[1]+t2-t1
		ratios = append(ratios, float64(t2-t1)/float64(t1-t0))
		cpu = append(cpu, float64(c2-c1)/float64(c1-c0))
	}
	sort.Float64s(ratios)
	sort.Float64s(cpu)
	b.ReportMetric(cpu[len(cpu)/2], "cpu_10x/1x")
	b.ReportMetric(float64(base*restoreTensors*4)*float64(b.N)/float64(ns[0])*1e3, "1x_MB/s")
	b.ReportMetric(float64(10*base*restoreTensors*4)*float64(b.N)/float64(ns[1])*1e3, "10x_MB/s")
	b.ReportMetric(ratios[len(ratios)/2], "time_10x/1x")
}

const restoreTensors = 8

// restoreCheckpoint writes 8 tensors of n elements over 4 ranks.
func restoreCheckpoint(b *testing.B, n int) string {
	const world = 4
	s, err := New(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	vals := make([]float32, n)
	for r := 0; r < world; r++ {
		var sh []Shard
		lo, hi := r*n/world, (r+1)*n/world
		for t := 0; t < restoreTensors; t++ {
			sh = append(sh, Float32Shard(fmt.Sprintf("t%d", t), []int{n}, int64(lo), vals[lo:hi]))
		}
		if err := s.WriteRank(1, r, world, sh); err != nil {
			b.Fatal(err)
		}
	}
	dir, err := s.Commit(Manifest{Step: 1, World: world})
	if err != nil {
		b.Fatal(err)
	}
	return dir
}

// restore opens dir for partial reads and reads it as 3 ranks would.
func restore(b *testing.B, dir string, n int) {
	const readers = 3
	c, err := OpenRanges(dir)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := 0; t < restoreTensors; t++ {
				if _, err := c.ReadElems(fmt.Sprintf("t%d", t), int64(r*n/readers), int64((r+1)*n/readers)); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}
