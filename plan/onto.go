package plan

// ParseOnto is Parse over base instead of Default: the keys s names are set
// on a copy of base, the others keep base's values. The syntax rules are
// Parse's (unknown and repeated keys are errors that name them), so every
// reader of plan text — the planner and the engine — shares one parser.
func ParseOnto(base Plan, s string) (Plan, error) {
	_, err := parseInto(&base, s)
	return base, err
}
