// Package metrics is the schema of `trellis train --metrics`: one JSON
// object per optimizer step, written by package train and read by viz (the
// dashboard and `trellis report`). It is defined once, here, below both, so
// that the writer and the readers cannot drift apart.
//
// A reader accepts older files: fields added later are optional
// (compute_s and misc_s are pointers, absent before the step-time split
// was reported; predicted is absent when the run had no prediction).
package metrics

// Line is one --metrics object: the step just completed, its loss and
// speed, and every rank's peak memory per tag and cumulative times.
type Line struct {
	Step       int      `json:"step"`
	Loss       float64  `json:"loss"`
	ValLoss    *float64 `json:"val_loss,omitempty"`
	LR         float64  `json:"lr"`
	GradNorm   float64  `json:"grad_norm"`
	TokensPerS float64  `json:"tokens_per_s"`
	MFU        float64  `json:"mfu"`
	StepS      float64  `json:"step_s"`
	Budget     int64    `json:"budget,omitempty"`           // bytes per device
	PredStepS  float64  `json:"predicted_step_s,omitempty"` // the planner's step time
	Skipped    bool     `json:"skipped,omitempty"`          // fp16: the step overflowed and was skipped
	LossScale  float64  `json:"loss_scale,omitempty"`       // fp16: the loss scale the step ran with
	// Predicted is a prediction for every rank, read from files that put
	// it on the step; a rank's own Predicted takes precedence.
	Predicted *Tags  `json:"predicted,omitempty"`
	Ranks     []Rank `json:"ranks"`
	// Run describes the run on the first line it writes (a resumed run's
	// first line has its own): the header a report shows.
	Run *RunHeader `json:"run,omitempty"`
	// Sample is the text generated at this step (the prompt and what
	// followed), when one was.
	Sample *string `json:"sample,omitempty"`
	// Experts is an MoE model's routing over the step (absent for a
	// dense model).
	Experts *Experts `json:"experts,omitempty"`
}

// Experts is an MoE model's routing over one step, summed over every
// rank's training micro-batches: for MoE block Layers[i], Load[i][e] the
// assignments (token, slot) its router gave expert e — before capacity:
// a step routes tokens·top_k of them per block — and Dropped[i][e] those
// past the expert's capacity (zero when dropless). AuxLoss is the mean
// over the step's micro-batches of the blocks' load-balancing losses
// (α·E·Σ_e f_e·P_e each, α included; 0 with aux_loss = 0). RecvRowsMax[i]
// is the most rows block Layers[i]'s experts computed on one rank in one
// forward pass over the step (under expert parallelism the busiest
// rank's dispatch: the rows it received from its group). Bias[i] is the
// block's expert bias after the step's update (router_expert_bias;
// absent without).
type Experts struct {
	Layers      []int       `json:"layers"`
	Load        [][]int64   `json:"load"`
	Dropped     [][]int64   `json:"dropped"`
	AuxLoss     float64     `json:"aux_loss"`
	RecvRowsMax []int64     `json:"recv_rows_max,omitempty"`
	Bias        [][]float32 `json:"expert_bias,omitempty"`
}

// RunHeader is what a run is: its plan, model and size.
type RunHeader struct {
	Plan          string `json:"plan"`               // canonical plan text
	Model         string `json:"model"`              // shape for people, e.g. "layers=4 hidden=256 ..."
	Params        int64  `json:"params"`             // model parameters
	Ranks         int    `json:"ranks"`              // world size
	TokensPerStep int    `json:"tokens_per_step"`    // all ranks
	FromStep      int    `json:"from_step"`          // steps completed before this run
	ToStep        int    `json:"to_step"`            // the last step it will take
	MFUPeak       string `json:"mfu_peak,omitempty"` // MFU's denominator and its source
}

// Rank is one rank's entry of a Line: peak bytes per tag since the start,
// and cumulative times in seconds. When the split is reported (ComputeS
// not nil), compute_s + comm_wait_s + bubble_s + misc_s is the rank's own
// wall time over its steps so far; older files have only comm_wait_s (and
// bubble_s).
type Rank struct {
	Rank      int     `json:"rank"`
	Tags              // peak bytes per tag, and of all at once ("peak")
	CommBusyS float64 `json:"comm_busy_s"`
	CommWaitS float64 `json:"comm_wait_s"`
	RingWaitS float64 `json:"ring_wait_s,omitempty"` // the part of comm_wait_s that is the ring attention's (cp)
	// The rest of the rank's cumulative step time (train/split.go).
	ComputeS *float64 `json:"compute_s,omitempty"` // forward and backward work
	// PeerWaitS is the part of ComputeS spent in collectives before the
	// group's last member arrived: waiting for peers still computing (on
	// shared cores, for the cores they hold). Absent where the backend
	// cannot tell (tcp, mpi) and in older files.
	PeerWaitS *float64 `json:"peer_wait_s,omitempty"`
	// EPWaitS is the part of CommWaitS spent in expert parallelism's
	// all-to-alls once the group's members had arrived. Absent without ep
	// and in older files.
	EPWaitS *float64 `json:"ep_wait_s,omitempty"`
	BubbleS float64  `json:"bubble_s"`         // pipeline idle
	MiscS   *float64 `json:"misc_s,omitempty"` // the rest of the step

	CommBytes CommBytes `json:"comm_bytes"`          // per mesh axis
	Predicted *Tags     `json:"predicted,omitempty"` // the planner's prediction of the peaks
}

// Tags is peak bytes per memory tag, and of all tags at once.
type Tags struct {
	Param     int64 `json:"param"`
	Grad      int64 `json:"grad"`
	Optim     int64 `json:"optim"`
	Act       int64 `json:"act"`
	Workspace int64 `json:"workspace"`
	Comm      int64 `json:"comm"`
	Peak      int64 `json:"peak"`
}

// TagNames are the memory tags in stacking order (package device's).
func TagNames() []string {
	return []string{"param", "grad", "optim", "act", "workspace", "comm"}
}

// Tag returns the bytes of one tag, or Peak for "peak" (0 for any other
// name).
func (t Tags) Tag(name string) int64 {
	switch name {
	case "param":
		return t.Param
	case "grad":
		return t.Grad
	case "optim":
		return t.Optim
	case "act":
		return t.Act
	case "workspace":
		return t.Workspace
	case "comm":
		return t.Comm
	case "peak":
		return t.Peak
	}
	return 0
}

// CommBytes are the payload bytes a rank passed to collectives over the
// run, per mesh axis.
type CommBytes struct {
	TP int64 `json:"tp"`           // the tensor-parallel group: activations (parallel/tp)
	DP int64 `json:"dp"`           // the data-parallel groups: gradients and ZeRO's parameters
	PP int64 `json:"pp"`           // the pipeline: activations and their gradients between stages, the tied embedding's gradient
	CP int64 `json:"cp,omitempty"` // the context-parallel ring: key/value blocks and their gradients' sums
	EP int64 `json:"ep,omitempty"` // the expert-parallel groups: the tokens' rows to their experts and back, their counts, the expert norm's sum
}
