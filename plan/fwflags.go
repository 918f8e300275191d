package plan

import (
	_ "embed"
	"fmt"
	"strings"
)

// The argument names of the framework versions the mappings match, so
// that a name the framework does not have is an error naming the nearest
// one it has (a misspelt flag would otherwise be read as "no effect").

//go:embed testdata/megatron-core_v0.12.0-args.txt
var megatronArgsText string

//go:embed testdata/megatron-core_v0.14.0-args.txt
var megatronArgs14Text string

// megatronArgExists checks a flag against the argument lists of
// Megatron-LM core_v0.12.0 (the dense mapping's release) and the flags
// core_v0.14.0 adds (the release of the mapping for models with experts
// or MLA): a flag of neither is an error naming the nearest.
func megatronArgExists(flag string) error {
	names := append(listNames(megatronArgsText), listNames(megatronArgs14Text)...)
	for _, n := range names {
		if n == flag {
			return nil
		}
	}
	return fmt.Errorf("plan: megatron arguments: %s is not an argument of %s nor %s (nearest: %s)", flag, megatronVersion, megatronMoEVersion, nearestName(flag, names))
}

// listNames reads a list of names, one a line, # comments skipped.
func listNames(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// nearestName is the name at the least edit distance from s (the first of
// equals in the list's order).
func nearestName(s string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		if d := editDistance(s, n); bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is Levenshtein's distance between a and b (bytes), in
// O(len(b)) space; names are short.
func editDistance(a, b string) int {
	if len(a) > 256 {
		a = a[:256]
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

//go:embed testdata/torchtitan-v0.2.0-keys.txt
var torchtitanKeysText string

// torchtitanKeysExist checks job-TOML keys against torchtitan v0.2.0's
// JobConfig: a key it does not have is an error naming the nearest.
func torchtitanKeysExist(keys []string) error {
	names := listNames(torchtitanKeysText)
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	for _, k := range keys {
		if !have[k] {
			return fmt.Errorf("plan: torchtitan: %s is not a key of %s's job configuration (nearest: %s)", k, torchtitanVersion, nearestName(k, names))
		}
	}
	return nil
}

// deepspeedKeys are the top-level keys of a DeepSpeed v0.16.4
// configuration: deepspeed/runtime/constants.py and the sections its
// config.py reads (zero_optimization, activation_checkpointing,
// flops_profiler, the monitors, aio, elasticity, autotuning,
// compression_training, data_efficiency, …), as
// https://www.deepspeed.ai/docs/config-json/ lists them.
func deepspeedKeys() []string {
	return []string{
		"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer", "scheduler",
		"fp16", "bf16", "bfloat16", "amp", "gradient_clipping", "prescale_gradients", "gradient_predivide_factor",
		"sparse_gradients", "zero_optimization", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
		"activation_checkpointing", "steps_per_print", "wall_clock_breakdown", "memory_breakdown", "dump_state",
		"flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "aio", "autotuning",
		"elasticity", "data_efficiency", "curriculum_learning", "compression_training", "sparse_attention", "pipeline",
		"communication_data_type", "seq_parallel_communication_data_type", "disable_allgather", "vocabulary_size",
		"eigenvalue", "progressive_layer_drop", "checkpoint", "data_types", "dataloader_drop_last", "graph_harvesting",
		"nebula", "weight_quantization", "quantize_training", "hybrid_engine", "compile", "timers",
		"use_data_before_expert_parallelism", "zero_force_ds_cpu_initialization", "torch_autocast", "tensor_parallel",
		"mics_shard_size", "mics_hierarchical_params_gather", "ds_pipe_replicated",
	}
}

// deepspeedKeysExist checks top-level keys against deepspeedKeys.
func deepspeedKeysExist(keys []string) error {
	names := deepspeedKeys()
	for _, k := range keys {
		if !contains(names, k) {
			return fmt.Errorf("plan: deepspeed config: %s is not a key of %s's configuration (nearest: %s)", k, deepspeedVersion, nearestName(k, names))
		}
	}
	return nil
}
