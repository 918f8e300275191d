package plan

import (
	"strconv"
	"strings"
	"unicode"
)

// maxName bounds a name read from a file (a model's _name_or_path, a
// cluster's name) as it is printed.
const maxName = 256

// printable is s as it may reach a terminal: control characters and other
// runes that are not graphic are escaped (\x1b, \u0007), so that a file's
// name or key cannot move the cursor, recolour or retitle the terminal;
// at most maxName runes are kept.
func printable(s string) string {
	if r := []rune(s); len(r) > maxName {
		s = string(r[:maxName]) + "…"
	}
	if !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) || r == '\\' }) {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

// printables is printable of each of ss.
func printables(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = printable(s)
	}
	return out
}
