package plan

// The JSON form of a search, as `trellis plan --json` prints it. Bytes and
// seconds throughout; global batch in sequences.

// ReportJSON is the top-level object. Evaluated is the candidates
// considered, fit + Σ rejected (Result.Candidates); costed the complete
// plans whose memory was computed.
type ReportJSON struct {
	Model     ModelJSON      `json:"model"`
	Plans     []EstimateJSON `json:"plans"`
	Evaluated int            `json:"evaluated"`
	Costed    int            `json:"costed"`
	Fit       int            `json:"fit"`
	Rejected  map[string]int `json:"rejected"`
	// Reason: why no candidate was met at all (the pinned keys break a rule).
	Reason string `json:"reason,omitempty"`
	// Advice: when no plan fits, why and what would make one fit (Job.Advice).
	Advice []string `json:"advice,omitempty"`
}

// ModelJSON names the model and its exact parameter count.
type ModelJSON struct {
	Name   string `json:"name"`
	Params int64  `json:"params"`
}

// PlanJSON is a plan's keys.
type PlanJSON struct {
	DP        int    `json:"dp"`
	TP        int    `json:"tp"`
	PP        int    `json:"pp"`
	CP        int    `json:"cp"`
	VPP       int    `json:"vpp"`
	ZeRO      int    `json:"zero"`
	SP        bool   `json:"sp"`
	MBS       int    `json:"mbs"`
	Schedule  string `json:"schedule"`
	Recompute string `json:"recompute"`
	Precision string `json:"precision"`
	Flash     bool   `json:"flash"`
	Order     string `json:"order"`
	// EP and ETP are the expert degrees, present only above 1 (a dense
	// plan's JSON is as before experts).
	EP  int `json:"ep,omitempty"`
	ETP int `json:"etp,omitempty"`
}

// MemoryJSON is the per-device memory, bytes.
type MemoryJSON struct {
	Param  int64 `json:"param"`
	Grad   int64 `json:"grad"`
	Optim  int64 `json:"optim"`
	Act    int64 `json:"act"`
	Other  int64 `json:"other"`
	Total  int64 `json:"total"`
	Budget int64 `json:"budget"`
}

// TimeJSON is the step time, seconds.
type TimeJSON struct {
	Compute     float64 `json:"compute"`
	CommExposed float64 `json:"comm_exposed"`
	Bubble      float64 `json:"bubble"`
	Misc        float64 `json:"misc"`
	Step        float64 `json:"step"`
	// CommEP is the exposed all-to-all, part of CommExposed (present for
	// plans with expert parallelism).
	CommEP float64 `json:"comm_ep,omitempty"`
}

// EstimateJSON is one ranked plan. PlanString is its canonical text form,
// ready for --explain and `trellis train --parallel`; Variants are the
// canonical forms of the plans that differ only in rank order or
// interleaved chunks and predict the same.
type EstimateJSON struct {
	Plan              PlanJSON   `json:"plan"`
	PlanString        string     `json:"plan_string"`
	Variants          []string   `json:"variants"`
	Memory            MemoryJSON `json:"memory"`
	Time              TimeJSON   `json:"time"`
	TFLOPsPerDevice   float64    `json:"tflops_per_device"`
	HWTFLOPsPerDevice float64    `json:"hw_tflops_per_device"`
	MFU               float64    `json:"mfu"`
	HFU               float64    `json:"hfu"`
	TokensPerS        float64    `json:"tokens_per_s"`
	// EngineRuns: the Trellis engine (on CPU) runs the plan, else
	// EngineRefusals says why not (plan.EngineRefusals); set by Job.Report.
	EngineRuns     bool     `json:"engine_runs"`
	EngineRefusals []string `json:"engine_refusals,omitempty"`
	// FP8Recipe: for an fp8 plan, the recipe the cost model assumes.
	FP8Recipe string `json:"fp8_recipe,omitempty"`
}

// JSON converts a plan.
func (p Plan) JSON() PlanJSON {
	return PlanJSON{DP: p.DP, TP: p.TP, PP: p.PP, CP: p.CP, VPP: p.VPP, ZeRO: p.ZeRO, SP: p.SP, MBS: p.MBS,
		Schedule: string(p.Schedule), Recompute: string(p.Recompute), Precision: string(p.Precision),
		Flash: p.Flash, Order: p.Order, EP: p.EP, ETP: p.ETP}
}

// JSON converts an estimate.
func (e Estimate) JSON() EstimateJSON {
	m, t := e.Memory, e.Time
	vs := make([]string, len(e.Variants))
	for i, v := range e.Variants {
		vs[i] = v.String()
	}
	return EstimateJSON{
		Plan: e.Plan.JSON(), PlanString: e.Plan.String(), Variants: vs,
		Memory: MemoryJSON{Param: m.Param, Grad: m.Grad, Optim: m.Optim, Act: m.Act, Other: m.Other,
			Total: m.Total, Budget: m.Budget},
		Time: TimeJSON{Compute: t.Compute, CommExposed: t.CommExposed, Bubble: t.Bubble, Misc: t.Misc,
			Step: t.Step, CommEP: t.EP},
		TFLOPsPerDevice: e.TFLOPsPerDevice, HWTFLOPsPerDevice: e.HWTFLOPsPerDevice,
		MFU: e.MFU, HFU: e.HFU, TokensPerS: e.TokensPerS,
	}
}

// Report builds the JSON form of a search result.
func (j Job) Report(r Result) ReportJSON {
	out := ReportJSON{
		Model:     ModelJSON{Name: j.Model.Name, Params: j.Model.Params()},
		Plans:     make([]EstimateJSON, 0, len(r.Plans)),
		Evaluated: r.Candidates(),
		Costed:    r.Evaluated,
		Fit:       r.Fitting,
		Rejected:  map[string]int{},
		Reason:    r.Reason,
	}
	for _, e := range r.Plans {
		ej := e.JSON()
		ej.EngineRefusals = j.EngineRefusals(e.Plan)
		ej.EngineRuns = len(ej.EngineRefusals) == 0
		ej.FP8Recipe = j.FP8Recipe(e.Plan)
		out.Plans = append(out.Plans, ej)
	}
	for k, v := range r.Rejected {
		out.Rejected[k] = v
	}
	return out
}
