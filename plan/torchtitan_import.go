package plan

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// torchtitanFile is the part of a torchtitan job TOML the planner reads
// (torchtitanTable); pointers tell a key given from one left to its
// default.
type torchtitanFile struct {
	Job struct {
		Description string `toml:"description"`
	} `toml:"job"`
	Model struct {
		Name       string   `toml:"name"`
		Flavor     string   `toml:"flavor"`
		Converters []string `toml:"converters"`
	} `toml:"model"`
	Training struct {
		LocalBatch  *int   `toml:"local_batch_size"`
		GlobalBatch *int   `toml:"global_batch_size"`
		SeqLen      *int   `toml:"seq_len"`
		Param       string `toml:"mixed_precision_param"`
		Reduce      string `toml:"mixed_precision_reduce"`
	} `toml:"training"`
	Parallelism struct {
		Replicate *int       `toml:"data_parallel_replicate_degree"`
		Shard     *int       `toml:"data_parallel_shard_degree"`
		Reshard   string     `toml:"fsdp_reshard_after_forward"`
		TP        *int       `toml:"tensor_parallel_degree"`
		CP        *int       `toml:"context_parallel_degree"`
		PP        *int       `toml:"pipeline_parallel_degree"`
		Schedule  string     `toml:"pipeline_parallel_schedule"`
		MBS       *int       `toml:"pipeline_parallel_microbatch_size"`
		Parts     [][]string `toml:"module_fqns_per_model_part"`
		EP        *int       `toml:"expert_parallel_degree"`
		ETP       *int       `toml:"expert_tensor_parallel_degree"`
	} `toml:"parallelism"`
	AC struct {
		Mode   string `toml:"mode"`
		Option string `toml:"selective_ac_option"`
	} `toml:"activation_checkpoint"`
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// importTorchtitan reads a torchtitan job TOML into a plan for the job.
// Defaults are torchtitan's: data_parallel_shard_degree -1 (the devices
// left), activation checkpointing "selective" every 2nd layer.
func (j Job) importTorchtitan(text string) (Imported, error) {
	var f torchtitanFile
	md, err := toml.Decode(text, &f)
	if err != nil {
		return Imported{}, fmt.Errorf("plan: torchtitan job file: %w", err)
	}
	var notes []string
	if u := md.Undecoded(); len(u) > 0 {
		keys := make([]string, len(u))
		for i, k := range u {
			keys[i] = k.String()
		}
		sort.Strings(keys)
		if err := torchtitanKeysExist(keys); err != nil {
			return Imported{}, err
		}
		notes = append(notes, "not read (no effect on the plan's cost in the planner's model): "+strings.Join(printables(keys), ", "))
	}
	par := f.Parallelism
	p := Default()
	p.TP, p.CP, p.PP = intOr(par.TP, 1), intOr(par.CP, 1), intOr(par.PP, 1)
	rep, shard := intOr(par.Replicate, 1), intOr(par.Shard, -1)
	if p.TP < 1 || p.CP < 1 || p.PP < 1 || rep < 1 || shard == 0 || shard < -1 || max(p.TP, p.CP, p.PP, rep, shard) > MaxDevices {
		return Imported{}, fmt.Errorf("plan: torchtitan: parallelism degrees tp=%d cp=%d pp=%d replicate=%d shard=%d: want 1..%d (shard may be -1)", p.TP, p.CP, p.PP, rep, shard, MaxDevices)
	}
	if shard == -1 {
		if n, ok := product(j.Devices, rep, p.TP, p.CP, p.PP); ok && j.Devices%n == 0 {
			shard = j.Devices / n
		}
	}
	if _, ok := product(j.Devices, rep, max(shard, 1), p.TP, p.CP, p.PP); !ok || shard < 1 || rep*shard*p.TP*p.CP*p.PP != j.Devices {
		return Imported{}, fmt.Errorf("plan: torchtitan: replicate·shard·tp·cp·pp = %d·%d·%d·%d·%d, but the job has %d devices", rep, shard, p.TP, p.CP, p.PP, j.Devices)
	}
	p.DP = rep * shard
	if shard > 1 || p.CP > 1 {
		p.ZeRO = 3
		if rep > 1 {
			notes = append(notes, fmt.Sprintf("HSDP (replicate %d × shard %d): costed as ZeRO-3 over all dp·cp ranks", rep, shard))
		}
		if par.Reshard != "always" && p.PP > 1 {
			notes = append(notes, fmt.Sprintf("fsdp_reshard_after_forward=%q with pp>1 keeps gathered parameters between forward and backward; costed as ZeRO-3", par.Reshard))
		}
	}
	p.SP = p.TP > 1
	if err := j.torchtitanExperts(intOr(par.EP, 1), intOr(par.ETP, 1), &p); err != nil {
		return Imported{}, err
	}
	if err := j.torchtitanPipeline(f, &p, &notes); err != nil {
		return Imported{}, err
	}
	if p.Recompute, err = torchtitanRecompute(f.AC.Mode, f.AC.Option, &notes); err != nil {
		return Imported{}, err
	}
	p.Precision = BF16
	switch {
	case slices.Contains(f.Model.Converters, "quantize.linear.float8"):
		p.Precision = FP8
	case f.Training.Param == "float32":
		p.Precision = FP32
	}
	im := Imported{Plan: p, Seq: intOr(f.Training.SeqLen, 0)}
	local := intOr(f.Training.LocalBatch, 8)
	if local < 1 || local > MaxDevices {
		return Imported{}, fmt.Errorf("plan: torchtitan: training.local_batch_size %d: want 1..%d", local, MaxDevices)
	}
	if im.GlobalBatch = intOr(f.Training.GlobalBatch, -1); im.GlobalBatch <= 0 {
		im.GlobalBatch = local * p.DP
	}
	if p.PP == 1 {
		p.MBS = local
	} else if p.MBS = intOr(par.MBS, 1); p.MBS < 1 || p.MBS > MaxDevices {
		return Imported{}, fmt.Errorf("plan: torchtitan: pipeline_parallel_microbatch_size %d: want 1..%d", p.MBS, MaxDevices)
	} else if local%p.MBS != 0 {
		return Imported{}, fmt.Errorf("plan: torchtitan: pipeline_parallel_microbatch_size %d does not divide local_batch_size %d", p.MBS, local)
	}
	im.Plan = p
	if name, flavor := torchtitanFlavor(j.Model); f.Model.Name != "" && (f.Model.Name != name || f.Model.Flavor != flavor) {
		notes = append(notes, fmt.Sprintf("[model] %s %s: the model costed is %s", printable(f.Model.Name), printable(f.Model.Flavor), j.Model.Name))
	}
	im.Notes = sortedNotes(notes)
	return im, nil
}

// torchtitanPipeline reads the schedule and the split, which must be the
// planner's.
func (j Job) torchtitanPipeline(f torchtitanFile, p *Plan, notes *[]string) error {
	par := f.Parallelism
	if p.PP == 1 {
		return nil
	}
	name := par.Schedule
	if name == "" {
		name = "1F1B"
	}
	found := false
	for s, n := range torchtitanSchedules() {
		if n == name {
			p.Schedule, found = s, true
		}
	}
	if !found {
		return fmt.Errorf("plan: torchtitan: pipeline_parallel_schedule %q: the planner models 1F1B, GPipe and Interleaved1F1B", name)
	}
	if len(par.Parts) == 0 {
		if p.Schedule == Interleaved {
			p.VPP = 2
		}
		*notes = append(*notes, fmt.Sprintf("no module_fqns_per_model_part: costed with the planner's split into %d chunks per rank", p.VPP))
		return nil
	}
	if len(par.Parts)%p.PP != 0 {
		return fmt.Errorf("plan: torchtitan: %d model parts for pipeline_parallel_degree %d: want a multiple", len(par.Parts), p.PP)
	}
	p.VPP = len(par.Parts) / p.PP
	if p.Schedule == DualPipeV {
		if p.VPP != 2 {
			return fmt.Errorf("plan: torchtitan: %d model parts per rank with schedule DualPipeV: want 2 (a V)", p.VPP)
		}
		p.VPP = 1
	} else if (p.VPP > 1) != (p.Schedule == Interleaved) {
		return fmt.Errorf("plan: torchtitan: %d model parts per rank with schedule %s", p.VPP, name)
	}
	got, err := torchtitanChunks(par.Parts, j.Model.Layers)
	if err != nil {
		return err
	}
	if want := chunkLayers(j.Model.Layers, len(got)); !slices.Equal(got, want) {
		return fmt.Errorf("plan: torchtitan: module_fqns_per_model_part splits the layers %v; the planner models %v", got, want)
	}
	return nil
}

// torchtitanRecompute reads [activation_checkpoint].
func torchtitanRecompute(mode, option string, notes *[]string) (Recompute, error) {
	switch mode {
	case "none":
		return RecomputeNone, nil
	case "full":
		return RecomputeFull, nil
	case "selective", "":
		if option == "op" {
			*notes = append(*notes, "selective_ac_option \"op\" (per-op: keeps matmul outputs) costed as recompute=selective (the attention core recomputed)")
			return RecomputeSelective, nil
		}
		if option == "" {
			option = "2"
		}
		*notes = append(*notes, fmt.Sprintf("selective_ac_option %q (every %s-th layer fully recomputed) costed as recompute=full", option, option))
		return RecomputeFull, nil
	}
	return "", fmt.Errorf("plan: torchtitan: activation_checkpoint.mode %q: the planner models none, full and selective", mode)
}
