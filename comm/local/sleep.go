package local

import "time"

// coarse is the resolution below which a Go timer cannot be trusted: an
// idle Go runtime sleeps in epoll_wait, whose timeout is whole
// milliseconds, so a 200 µs timer fires after about 1 ms. Emulated
// transfers are often shorter than that.
const coarse = 2 * time.Millisecond

// sleepUntil sleeps until deadline, returning early once broken is closed:
// with a Go timer for all but the last coarse interval, then in slices of
// at most a millisecond with the operating system's high-resolution sleep
// (nanosleep: the goroutine's thread blocks, burning no CPU), checking
// broken between slices.
func sleepUntil(deadline time.Time, broken <-chan struct{}) {
	if d := time.Until(deadline); d > coarse {
		timer := time.NewTimer(d - coarse)
		select {
		case <-timer.C:
		case <-broken:
			timer.Stop()
			return
		}
	}
	for {
		d := time.Until(deadline)
		if d <= 0 {
			return
		}
		select {
		case <-broken:
			return
		default:
		}
		preciseSleep(min(d, time.Millisecond))
	}
}
