// Package layers holds the test that keeps Trellis's import graph pointing one
// way, as docs/ARCHITECTURE.md draws it. It has no code of its own.
package layers
