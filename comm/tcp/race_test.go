//go:build race

package tcp

// raceSlow scales the short timeouts of the failure tests under the race
// detector, which slows every memory access several times: a live rank
// must not look dead.
const raceSlow = 5
