package tcp

import (
	"testing"

	"trellis/comm/commtest"
)

// TestConformance runs the comm conformance suite with every rank a
// goroutine holding its own TCP endpoint.
func TestConformance(t *testing.T) {
	commtest.Run(t, func(t *testing.T, n int, opts commtest.Options) commtest.World {
		gs := startWorld(t, n, opts.Timeout, func(r int, c *Config) { c.MaxBuffered = opts.MaxBuffered })
		return commtest.World{Groups: gs, Kill: func(r int) { kill(gs[r]) }}
	})
}
