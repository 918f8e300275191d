package plan

import "fmt"

// torchtitanExperts reads expert_parallel_degree and
// expert_tensor_parallel_degree (torchtitan v0.2.0: with ep = 1 the experts
// are split as the MLP, etp = tp).
func (j Job) torchtitanExperts(ep, etp int, p *Plan) error {
	if ep < 1 || etp < 1 {
		return fmt.Errorf("plan: torchtitan: expert_parallel_degree %d, expert_tensor_parallel_degree %d: want at least 1", ep, etp)
	}
	if !j.Model.moe() {
		if ep > 1 || etp > 1 {
			return fmt.Errorf("plan: torchtitan: expert_parallel_degree %d, expert_tensor_parallel_degree %d: the model %s has no experts", ep, etp, j.Model.Name)
		}
		return nil
	}
	if ep == 1 {
		etp = p.TP
	}
	p.SetExperts(ep, etp)
	return nil
}
