package plan

import (
	"fmt"
	"strings"
)

// The contract between the planner and the engine: on a cluster whose
// ranks run the Trellis engine (engine_stash, the cluster file `trellis
// profile` writes) the search keeps only plans EngineRefusals accepts, so
// every plan it prints runs; on any other cluster each printed plan says
// whether the engine (on CPU) runs it. The verdict is EngineRefusals',
// asked per plan, so a mechanism the engine learns is searched at once.

// rejEnginePrefix starts the rejection key of a plan the engine refuses on
// a cluster of engine ranks; the rest is EngineRefusals' first line.
const rejEnginePrefix = "engine: "

// engineRefused cuts p (its n orders) when the job's cluster runs the
// engine and the engine refuses p, counting it under the refusal.
func (s *searcher) engineRefused(p Plan, n int) bool {
	if !s.job.Cluster.EngineStash {
		return false
	}
	r := s.job.EngineRefusals(p)
	if len(r) == 0 {
		return false
	}
	s.reject(rejEnginePrefix+r[0], n)
	return true
}

// EngineNote says whether the Trellis engine runs p for the job's model on
// CPU ranks: "" on a cluster of engine ranks (every plan the search keeps
// runs there), else "runs on the CPU engine" or "not on the CPU engine:
// " and its refusals.
func (j Job) EngineNote(p Plan) string {
	if j.Cluster.EngineStash {
		return ""
	}
	if r := j.EngineRefusals(p); len(r) > 0 {
		return "not on the CPU engine: " + strings.Join(r, "; ")
	}
	return "runs on the CPU engine"
}

// EngineRefusals is EngineRefusals' table for the job's model and the
// engine's split of the layers into pipeline chunks (ChunkLayers, which
// the engine's stages are cut by: every chunk holds a layer, where the
// planner's own rule lets the end stages hold none): the lines why the
// engine does not run p, none when it does.
func (j Job) EngineRefusals(p Plan) []string {
	r := EngineRefusals(j.Model, p)
	if p.PP > 1 || p.VPP > 1 {
		if _, err := ChunkLayers(j.Model.Layers, p.PP, max(p.VPP, 1)); err != nil {
			r = append(r, "pipeline: "+err.Error())
		}
	}
	return r
}

// engineRefusedAdvice is why no plan was found when the engine on the
// cluster refused every candidate that broke no other rule: the refusal
// that cut the most.
func engineRefusedAdvice(r Result) string {
	best, n := "", 0
	for k, v := range r.Rejected {
		if strings.HasPrefix(k, rejEnginePrefix) && (v > n || v == n && k < best) {
			best, n = k, v
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("the cluster's ranks run the Trellis engine (engine_stash), which refuses every candidate that fits the rules (%d: %s)", n, strings.TrimPrefix(best, rejEnginePrefix))
}
