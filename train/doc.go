// Package train is the engine's composition root and step loop: it turns a
// job (model, plan, data, checkpoints) into every rank's program and runs
// it.
//
// From a job to the kernels, every value takes one way:
//
//	Job.resolve          the job's checks, each refusal one line naming the
//	                     keys and the rule: the engine's table of what it
//	                     runs (plan.EngineRefusals, which the planner
//	                     consults too), the model's shape rules (arch.Part,
//	                     plan.ChunkLayers), the schedule's (pp.Build), the
//	                     memory estimate; the plan's precision becomes one
//	                     precision.Policy (policy)
//	newTopology          every group of the rank, built once from (plan,
//	                     mesh, world): tp, the dp reduction group and its
//	                     gather twin, the pipeline, its link and the tied
//	                     embedding's ends, under expert parallelism the ep
//	                     and edp groups carved out of dp; the rank's model
//	                     part and pipeline layout
//	rank.compose         the state strategy (parallel/zero: ZeRO 0–3 over
//	                     the stage's units of the rank's part, reduced over
//	                     the dp group, the norm summed over the pipeline and
//	                     tp; under ep a second instance over the expert
//	                     tensors and edp, epState), the model runner (its
//	                     part, its tp and ep groups, the policy) and the
//	                     pipeline executor
//	                     (parallel/pp) that runs every step — a run without
//	                     a pipeline is a pipeline of one stage, 1F1B
//	rank.step            BeginStep; the executor's schedule over the step's
//	                     micro-batches (data.Slice of the global batch);
//	                     FinishGrads; Update (clipping, loss scaling, AdamW);
//	                     the loss mean
//	rank.runStep         statistics (every rank's memory peaks per tag and
//	                     communication, all-gathered), evaluation, samples,
//	                     checkpoints (per-tensor shards any plan reads back)
//
// Run starts every rank as a goroutine (comm/local) or, given a world group
// (trellis launch, mpirun), this process's rank; rank 0 reports (metrics,
// log lines, the summary, the planner's prediction beside the
// measurement).
package train
