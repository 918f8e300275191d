package shm

import (
	"math"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Futex operations on words of a shared mapping: not FUTEX_PRIVATE, so a
// waker in one process wakes a waiter in another.
const (
	futexWait = 0
	futexWake = 1
)

// sleepOn blocks while *w == seen, for at most d (a wake, a signal or a
// spurious return end it early: callers re-check their condition).
func sleepOn(w *atomic.Uint32, seen uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(max(d, time.Microsecond)))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(seen),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// wakeAll wakes every waiter sleeping on w.
func wakeAll(w *atomic.Uint32) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, math.MaxInt32, 0, 0, 0)
}

// event is a futex word that only moves forward and the number of ranks
// sleeping on it. Whoever moves it wakes the sleepers.
type event struct{ v, zz *atomic.Uint32 }

func (m mem) event(off int) event { return event{m.u32(off), m.u32(off + 4)} }

// store sets the word and wakes any sleeper.
func (e event) store(x uint32) {
	e.v.Store(x)
	if e.zz.Load() != 0 {
		wakeAll(e.v)
	}
}

// bump advances the word by one and wakes any sleeper.
func (e event) bump() {
	e.v.Add(1)
	if e.zz.Load() != 0 {
		wakeAll(e.v)
	}
}
