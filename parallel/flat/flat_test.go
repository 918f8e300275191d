package flat

import (
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"trellis/checkpoint"
	"trellis/comm"
)

func TestLayoutBuckets(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		units [][2]int // each bucket's [First, Last]
	}{
		{"one unit per bucket", Config{UnitSizes: []int{5, 7, 7, 2}, Ranks: 4}, [][2]int{{0, 0}, {1, 1}, {2, 2}, {3, 3}}},
		{"everything fits", Config{UnitSizes: []int{5, 7, 7, 2}, MaxElems: 100, Ranks: 3}, [][2]int{{0, 3}}},
		{"grouped from the last unit down", Config{UnitSizes: []int{5, 7, 7, 2}, MaxElems: 9, Ranks: 2}, [][2]int{{0, 0}, {1, 1}, {2, 3}}},
		{"oversized unit alone", Config{UnitSizes: []int{3, 20, 3, 3}, MaxElems: 6, Ranks: 1}, [][2]int{{0, 0}, {1, 1}, {2, 3}}},
		{"exact fit", Config{UnitSizes: []int{4, 4, 4, 4}, MaxElems: 8, Ranks: 8}, [][2]int{{0, 1}, {2, 3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var got [][2]int
			for _, b := range l.Buckets {
				got = append(got, [2]int{b.First, b.Last})
			}
			if !reflect.DeepEqual(got, c.units) {
				t.Fatalf("buckets %v, want %v", got, c.units)
			}
			checkLayout(t, l, c.cfg)
		})
	}
}

// checkLayout holds the invariants: buckets tile the vector in order,
// padded buffers tile in order, every bucket splits into N equal chunks
// whose valid parts tile the bucket, units sit inside their buckets.
func checkLayout(t *testing.T, l *Layout, c Config) {
	t.Helper()
	off, poff := 0, 0
	for i, b := range l.Buckets {
		if b.Offset != off || b.POffset != poff {
			t.Errorf("bucket %d at %d (padded %d), want %d (%d)", i, b.Offset, b.POffset, off, poff)
		}
		if b.Padded%c.Ranks != 0 || b.Padded < b.Len || b.Padded-b.Len >= c.Ranks {
			t.Errorf("bucket %d: len %d padded to %d for %d ranks", i, b.Len, b.Padded, c.Ranks)
		}
		next := b.Offset
		for r := 0; r < c.Ranks; r++ {
			lo, n := b.Shard(r)
			if n > 0 && lo != next || n < 0 || n > b.Chunk() {
				t.Errorf("bucket %d rank %d: shard [%d,+%d), want start %d, at most %d", i, r, lo, n, next, b.Chunk())
			}
			next += n
		}
		if next != b.Offset+b.Len {
			t.Errorf("bucket %d: shards end at %d, want %d", i, next, b.Offset+b.Len)
		}
		for u := b.First; u <= b.Last; u++ {
			if l.Of(u) != i {
				t.Errorf("unit %d in bucket %d, want %d", u, l.Of(u), i)
			}
		}
		off += b.Len
		poff += b.Padded
	}
	if off != l.Size || poff != l.Padded {
		t.Errorf("size %d padded %d, want %d %d", l.Size, l.Padded, off, poff)
	}
	start := 0
	for u, n := range c.UnitSizes {
		pos, m := l.InBucket(u)
		if b := l.Buckets[l.Of(u)]; b.Offset+pos != start || m != n {
			t.Errorf("unit %d at %d+%d len %d, want %d len %d", u, b.Offset, pos, m, start, n)
		}
		start += n
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Ranks: 1}, "UnitSizes is empty"},
		{Config{UnitSizes: []int{1}, Ranks: 0}, "Ranks=0"},
		{Config{UnitSizes: []int{1}, Ranks: 1, MaxElems: -1}, "MaxElems=-1"},
		{Config{UnitSizes: []int{1, 0}, Ranks: 1}, "UnitSizes[1]=0"},
	}
	for _, c := range cases {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one mentioning %q", c.cfg, err, c.want)
		}
	}
}

// chanWork is a Work that finishes when its channel is closed.
type chanWork struct {
	c   chan struct{}
	err error
}

func (w *chanWork) Wait() error { <-w.c; return w.err }

func TestTrackerExposedAndDone(t *testing.T) {
	var tr Tracker
	w := &chanWork{c: make(chan struct{}), err: errors.New("boom")}
	ran := false
	op := tr.Watch(w, func() { ran = true })
	if op.Done() {
		t.Fatal("done before the work finished")
	}
	go func() { time.Sleep(30 * time.Millisecond); close(w.c) }()
	if err := op.Wait(); err == nil || err.Error() != "boom" {
		t.Fatalf("Wait = %v, want the work's error", err)
	}
	if !ran || !op.Done() {
		t.Fatalf("then ran %v, done %v", ran, op.Done())
	}
	if e := tr.Exposed(); e < 20*time.Millisecond {
		t.Errorf("exposed %v, want about the 30ms blocked", e)
	}
	// A finished op costs no exposed time.
	before := tr.Exposed()
	done := tr.Watch(comm.Done(nil), nil)
	for !done.Done() {
		time.Sleep(time.Millisecond)
	}
	if err := done.Wait(); err != nil || tr.Exposed() != before {
		t.Errorf("waiting on a finished op: err %v, exposed %v -> %v", err, before, tr.Exposed())
	}
}

// arrivedWork is a chanWork whose group's last member arrived at last.
type arrivedWork struct {
	chanWork
	last time.Time
}

func (w *arrivedWork) ArrivedAt() time.Time { return w.last }

// The tracker's Skew is the part of the compute goroutine's blocked time
// before the group's last member arrived: blocked 60 ms of which the
// first 40 waited for a peer.
func TestTrackerSkew(t *testing.T) {
	var tr Tracker
	w := &arrivedWork{chanWork: chanWork{c: make(chan struct{})}}
	op := tr.Watch(w, nil)
	start := time.Now()
	w.last = start.Add(40 * time.Millisecond)
	go func() { time.Sleep(60 * time.Millisecond); close(w.c) }()
	if err := op.Wait(); err != nil {
		t.Fatal(err)
	}
	s := tr.Stats()
	if s.Wait < 50*time.Millisecond || s.Skew < 35*time.Millisecond || s.Skew > 41*time.Millisecond || s.Skew > s.Wait {
		t.Errorf("wait %v, skew %v: want about 60ms of which 40ms skew", s.Wait, s.Skew)
	}
}

// crowdedWork is an arrivedWork on a queue whose ranks share cores.
type crowdedWork struct {
	arrivedWork
	crowd *comm.Crowding
}

func (w *crowdedWork) Crowding() *comm.Crowding { return w.crowd }

// On shared cores the crowded part of a wait is the whole wait's, the
// wait for peers' included, and Skew is what of the wait for peers left
// the cores idle: 3 ranks on 2 cores, a second rank blocked throughout,
// so that a quarter of every wait ran the third rank's work (the
// measure's share 3/4 exposed); blocked 60 ms, of which the first 40
// waited for a peer: Crowded a quarter of the 60, Skew three quarters of
// the 40 (it was all 40, and Crowded a quarter of the other 20: a
// pipeline's drain, which waits for peers, was booked whole).
func TestTrackerSkewLeavesTheCores(t *testing.T) {
	var tr Tracker
	crowd := comm.NewCrowding(3, 2)
	other := crowd.Mark()
	w := &crowdedWork{arrivedWork{chanWork: chanWork{c: make(chan struct{})}}, crowd}
	op := tr.Watch(w, nil)
	w.last = time.Now().Add(40 * time.Millisecond)
	go func() { time.Sleep(60 * time.Millisecond); close(w.c) }()
	if err := op.Wait(); err != nil {
		t.Fatal(err)
	}
	crowd.Crowded(other, 0)
	s := tr.Stats()
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	if math.Abs(ms(s.Skew)-30) > 4 || math.Abs(ms(s.Crowded)-ms(s.Wait)/4) > 2 {
		t.Errorf("wait %.1f ms, skew %.1f, crowded %.1f; want skew 30, crowded a quarter of the wait", ms(s.Wait), ms(s.Skew), ms(s.Crowded))
	}
}

// A watched operation's time is the tracker's alone: the watcher
// goroutine is not a caller of the group's Wait, so the group's Stats
// count only who blocks on it directly. (The gradient norm's all-reduce
// on the tensor-parallel group was counted in both, its 40 ms twice, and
// the step's parts added to more than the step.)
func TestWatchedIsNotTheGroupsWait(t *testing.T) {
	q := comm.NewQueue()
	defer q.Close()
	var tr Tracker
	w := q.Submit(0, func() error { time.Sleep(40 * time.Millisecond); return nil })
	op := tr.Watch(w, nil)
	if err := op.Wait(); err != nil {
		t.Fatal(err)
	}
	if s := q.Stats(); s.Wait != 0 || s.Busy < 35*time.Millisecond {
		t.Errorf("the queue's Wait %v (want 0: no caller blocked on it), Busy %v (want about 40ms)", s.Wait, s.Busy)
	}
	if e := tr.Exposed(); e < 35*time.Millisecond {
		t.Errorf("exposed %v, want about the 40ms blocked", e)
	}
	// A direct caller is still the queue's.
	if err := q.Submit(0, func() error { time.Sleep(20 * time.Millisecond); return nil }).Wait(); err != nil {
		t.Fatal(err)
	}
	if s := q.Stats(); s.Wait < 15*time.Millisecond {
		t.Errorf("the queue's Wait %v after a direct 20ms wait", s.Wait)
	}
}

func TestShardsRoundTrip(t *testing.T) {
	ts := []Tensor{
		{Name: "a", Offset: 0, Size: 6, Shape: []int{2, 3}},
		{Name: "b", Offset: 6, Size: 5, Shape: []int{5}},
	}
	full := make([]float32, 11)
	for i := range full {
		full[i] = float32(i) + 0.5
	}
	dir := t.TempDir()
	st, err := checkpoint.New(checkpoint.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// Two ranks: [0,4) and [4,11), cutting tensor a.
	cuts := [][2]int{{0, 4}, {4, 11}}
	for r, c := range cuts {
		if err := st.WriteRank(1, r, 2, Shards(ts, "p.", c[0], full[c[0]:c[1]])); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Commit(checkpoint.Manifest{Step: 1, World: 2}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(filepath.Join(dir))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 7)
	if err := Read(ck, ts, "p.", 3, got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, full[3:10]) {
		t.Errorf("read %v, want %v", got, full[3:10])
	}
	if err := Read(ck, ts, "q.", 0, got); err == nil {
		t.Errorf("reading missing tensors succeeded")
	}
}
