package tcp

import (
	"testing"

	"trellis/comm/commtest"
)

// TestConformance runs the comm conformance suite with every rank a
// goroutine holding its own TCP endpoint, with frame authentication on (the
// plain frames of the default are what every other test here runs).
func TestConformance(t *testing.T) {
	commtest.Run(t, func(t *testing.T, n int, opts commtest.Options) commtest.World {
		gs := startWorld(t, n, opts.Timeout, func(r int, c *Config) { c.MaxBuffered, c.FrameAuth = opts.MaxBuffered, true })
		return commtest.World{Groups: gs, Kill: func(r int) { kill(gs[r]) }}
	})
}
