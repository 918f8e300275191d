package plan

import (
	"fmt"
	"sort"
	"strings"
)

// checkOrder accepts a permutation of tp, cp, dp, pp joined by "-".
func checkOrder(s string) error {
	parts := strings.Split(s, "-")
	got := append([]string(nil), parts...)
	sort.Strings(got)
	if strings.Join(got, ",") != "cp,dp,pp,tp" {
		return fmt.Errorf("plan: order=%q: want the four axes tp, cp, dp, pp joined by '-', each once (e.g. %s)", s, DefaultOrder)
	}
	return nil
}

// orderOK reports a permutation of tp, cp, dp, pp joined by "-", without
// allocating.
func orderOK(s string) bool {
	if len(s) != 11 {
		return false
	}
	seen := 0
	for i := 0; i < 4; i++ {
		if i > 0 && s[3*i-1] != '-' {
			return false
		}
		bit := 0
		switch s[3*i : 3*i+2] {
		case "tp":
			bit = 1
		case "cp":
			bit = 2
		case "dp":
			bit = 4
		case "pp":
			bit = 8
		}
		if bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return true
}
