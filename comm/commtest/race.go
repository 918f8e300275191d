//go:build race

package commtest

// raceEnabled shrinks the large cases under the race detector, which slows
// every memory access tenfold.
const raceEnabled = true
