package plan

import (
	"fmt"
	"strings"
)

// Rules the frameworks share (see fwRule).

// scheduleRule: a framework with only some pipeline schedules runs 1F1B
// for the others.
func scheduleRule(name string, allowed ...Schedule) fwRule {
	return func(j Job, p Plan) ([]Plan, string) {
		for _, s := range allowed {
			if p.Schedule == s {
				return nil, ""
			}
		}
		q := p
		q.Schedule, q.VPP = OneFOneB, 1
		return []Plan{q}, fmt.Sprintf("%s has no %s schedule (it has %s)", name, p.Schedule, joinSchedules(allowed))
	}
}

func joinSchedules(ss []Schedule) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, ", ")
}

// orderRule: a framework with fixed rank orders. An allowed order that
// places every group on the same nodes is the same plan in cost; else
// every allowed order is a candidate.
func orderRule(name string, allowed ...string) fwRule {
	return func(j Job, p Plan) ([]Plan, string) {
		for _, o := range allowed {
			if p.Order == o {
				return nil, ""
			}
		}
		pl := place(p, j.Cluster.DevicesPerNode)
		var same, all []Plan
		for _, o := range allowed {
			q := p
			q.Order = o
			all = append(all, q)
			if place(q, j.Cluster.DevicesPerNode) == pl {
				same = append(same, q)
			}
		}
		if len(same) > 0 {
			return same[:1], fmt.Sprintf("%s orders ranks only as %s; %s places every group on the same nodes as order=%s",
				name, strings.Join(allowed, " or "), same[0].Order, p.Order)
		}
		return all, fmt.Sprintf("%s orders ranks only as %s", name, strings.Join(allowed, " or "))
	}
}

// splitAlternatives are the nearest plans whose layer split a framework
// can make (ok): the same pp with another interleaving degree or none,
// else another pp (dp takes up the devices) without interleaving.
func splitAlternatives(j Job, p Plan, ok func(L, pp, vpp int) bool) []Plan {
	L := j.Model.Layers
	var out []Plan
	if p.Schedule == Interleaved {
		for _, v := range interleaveDegrees(L, p.PP) {
			if ok(L, p.PP, v) {
				q := p
				q.VPP = v
				out = append(out, q)
			}
		}
	}
	if ok(L, p.PP, 1) {
		q := p
		q.VPP = 1
		if q.Schedule == Interleaved {
			q.Schedule = OneFOneB
		}
		out = append(out, q)
	}
	if len(out) > 0 {
		return out
	}
	for _, pp := range divisors(p.PP * p.DP) {
		if pp == p.PP || !ok(L, pp, 1) {
			continue
		}
		q := p
		q.DP, q.PP, q.VPP = p.DP*p.PP/pp, pp, 1
		if q.Schedule == Interleaved {
			q.Schedule = OneFOneB
		}
		out = append(out, q)
	}
	return out
}

// zeroRule: a framework that shards state only in some ways runs the
// nearest of its stages.
func zeroRule(name string, allowed ...int) fwRule {
	return func(j Job, p Plan) ([]Plan, string) {
		var out []Plan
		for _, z := range allowed {
			if p.ZeRO == z {
				return nil, ""
			}
			q := p
			q.ZeRO = z
			out = append(out, q)
		}
		return out, fmt.Sprintf("%s has no ZeRO-%d here", name, p.ZeRO)
	}
}

// keyRule: a framework that supports only some values of one key.
func keyRule(name, key, why string, ok func(Plan) bool, alts ...string) fwRule {
	return func(j Job, p Plan) ([]Plan, string) {
		if ok(p) {
			return nil, ""
		}
		var out []Plan
		for _, v := range alts {
			q := p
			if q.Set(key, v) == nil {
				out = append(out, q)
			}
		}
		return out, fmt.Sprintf("%s: %s=%s %s", name, key, p.Get(key), why)
	}
}
