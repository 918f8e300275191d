//go:build !race

package tcp

// raceSlow scales the short timeouts of the failure tests (see race_test.go).
const raceSlow = 1
