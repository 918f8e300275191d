package launch

import (
	"fmt"
	"strconv"
	"strings"
)

func slurmEnv(get func(string) string) (Env, error) {
	v, err := ints(get, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
	if err != nil {
		return Env{}, err
	}
	e := Env{Rank: v[0], WorldSize: v[1], LocalRank: v[2], MasterPort: DefaultMasterPort, Source: "slurm"}
	if get("SLURM_NODEID") != "" {
		if e.NodeRank, err = atoi(get, "SLURM_NODEID"); err != nil {
			return Env{}, err
		}
	}
	if e.LocalWorldSize, err = slurmLocalSize(get, e.NodeRank); err != nil {
		return Env{}, err
	}
	for _, k := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if l := get(k); l != "" {
			if e.MasterAddr, err = FirstHost(l); err != nil {
				return Env{}, fmt.Errorf("launch: %s: %w", k, err)
			}
			break
		}
	}
	if e.MasterAddr == "" {
		e.MasterAddr = get("SLURM_LAUNCH_NODE_IPADDR")
	}
	return e, nil
}

// slurmLocalSize is the number of tasks on node `node`.
func slurmLocalSize(get func(string) string, node int) (int, error) {
	if v := get("SLURM_NTASKS_PER_NODE"); v != "" {
		return atoi(get, "SLURM_NTASKS_PER_NODE")
	}
	for _, k := range []string{"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
		if v := get(k); v != "" {
			counts, err := TasksPerNode(v)
			if err != nil {
				return 0, fmt.Errorf("launch: %s: %w", k, err)
			}
			if node < 0 || node >= len(counts) {
				return 0, fmt.Errorf("launch: %s=%q has no entry for node %d", k, v, node)
			}
			return counts[node], nil
		}
	}
	return 0, fmt.Errorf("launch: Slurm sets neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE")
}

// TasksPerNode expands Slurm's compressed task counts: "4(x2),3" is
// [4 4 3].
func TasksPerNode(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		count, times := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			count, times = part[:i], part[i+2:len(part)-1]
		}
		c, err1 := strconv.Atoi(count)
		n, err2 := strconv.Atoi(times)
		if err1 != nil || err2 != nil || c < 1 || n < 1 || n > 1<<20 {
			return nil, fmt.Errorf("bad task count %q in %q", part, s)
		}
		for range n {
			out = append(out, c)
		}
	}
	return out, nil
}

// FirstHost returns the first host of a Slurm node list such as
// "gpu[01-04,07],cpu5" (gpu01) or "a,b" (a).
func FirstHost(list string) (string, error) {
	depth, end := 0, len(list)
	for i, c := range list {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 && end == len(list) {
				end = i
			}
		}
	}
	first := list[:end]
	open := strings.IndexByte(first, '[')
	if open < 0 {
		if first == "" {
			return "", fmt.Errorf("empty node list %q", list)
		}
		return first, nil
	}
	closing := strings.IndexByte(first, ']')
	if closing < open {
		return "", fmt.Errorf("unbalanced brackets in node list %q", list)
	}
	inner := first[open+1 : closing]
	if i := strings.IndexAny(inner, ",-"); i >= 0 {
		inner = inner[:i]
	}
	if inner == "" {
		return "", fmt.Errorf("empty range in node list %q", list)
	}
	return first[:open] + inner + first[closing+1:], nil
}
