package plan

import "fmt"

// deepspeedExpertRule holds a plan with experts to what DeepSpeed-MoE
// expresses (deepspeed.moe.layer.MoE: ep_size expert-parallel groups
// carved out of the data-parallel ranks, and enable_expert_tensor_parallelism
// splitting the experts as the tensor-parallel MLP): ep divides dp and etp
// is 1 or tp. The nearest are the largest such ep at etp 1 and at tp.
func deepspeedExpertRule(j Job, p Plan) ([]Plan, string) {
	if !j.Model.moe() {
		return nil, ""
	}
	ep, etp := p.Experts()
	if p.DP%ep == 0 && (etp == 1 || etp == p.TP) {
		return nil, ""
	}
	var alts []Plan
	for _, e := range []int{1, p.TP} {
		best := 1
		for _, d := range divisors(j.Model.experts().Experts) {
			if d <= ep && p.DP%d == 0 && j.Model.experts().FFN%e == 0 {
				best = d
			}
		}
		q := p
		q.SetExperts(best, e)
		alts = append(alts, q)
	}
	return alts, fmt.Sprintf("DeepSpeed-MoE carves expert-parallel groups out of the data-parallel ranks (ep=%d must divide dp=%d) and splits experts as the tensor-parallel MLP or not at all (etp = 1 or tp, not %d)", ep, p.DP, etp)
}
