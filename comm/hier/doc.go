// Package hier is the comm backend for a job that spans hosts: a group's
// collectives run as intra-host phases on one transport (comm/shm: the
// ranks of a host share memory) and inter-host phases on another (comm/tcp
// or comm/mpi: every rank of the job), and the result is bit for bit what
// comm/local computes for the same ranks.
//
//	world, err := hier.New(hier.Config{Inter: tcpWorld, Intra: shmWorld, Hosts: hosts})
//
// Hosts[r] names the host of world rank r; Intra is the world of this
// host's ranks (in world-rank order, its GlobalRanks the world ranks).
//
// # Which transport a group uses
//
// A group whose members all share one host is a group of Intra; a group
// with no two members on one host is a group of Inter; only a group that
// mixes is hierarchical. So with tensor parallelism inside a host (the
// mesh's default order) the TP groups are shared-memory groups and the
// data-parallel groups across hosts are TCP groups, and only the world and
// the groups that straddle (a DP group over two ranks of each host) pay
// for the composition.
//
// # Rank order
//
// comm/local folds every element left to right over the group's ranks,
// s = ((x_0 ⊕ x_1) ⊕ x_2) ⊕ … ⊕ x_{p−1} (in fp32; bf16 widened, rounded
// once at the end; Avg the sum times fl(1/p)). A hierarchical fold must
// not associate it otherwise: (x_0 ⊕ x_1) ⊕ (x_2 ⊕ x_3), a sum per host
// and then across hosts, differs in the last bits. So the group's members
// are cut into runs, the maximal stretches of consecutive members on one
// host, R_0, R_1, …, R_{k−1}, and the fold is carried along the runs as a
// prefix: the first member of R_j receives P_{j−1}, the fold of every
// earlier member, and contributes y = P_{j−1} ⊕ x_first instead of its
// own x (one ⊕, the fold's own next step); R_j's members then all-reduce
// (y, x_2, …) in rank order on their intra-host group, which is the fold
// continued, P_j; R_j's last member sends P_j on. The last run holds the
// whole fold, scales and rounds it once, and sends the result back to
// the first member of every other run, which broadcasts it within its
// run. Partial folds of bf16 travel in fp32, unrounded. With two hosts
// holding contiguous halves of the group (k = 2) that is the buffer once
// across the network each way, however many ranks each host has (comm/tcp
// over the same p ranks, 2 per host, sends 1.75 buffers each way: its
// direct reduce-scatter ½ per rank, its all-gather ring ¾ per crossing
// edge); with k runs, 2(k−1) messages in a chain, each of the buffer.
//
// Reduce-scatter is that all-reduce on a copy of src, keeping chunk r.
// All-gather: each host all-gathers its members' chunks in shared memory,
// the first member of each host (its leader) exchanges the host's block
// with every other leader, and broadcasts the assembled result at home.
// Broadcast: the root sends to every other host's leader, then each host
// broadcasts in shared memory. All-to-all: pairs on one host exchange in
// shared memory, pairs across hosts directly over Inter, at once. Barrier:
// intra, leaders, intra. Send and Recv go over Intra to a peer on this
// host and over Inter otherwise, so messages of one (peer, tag) stay in
// order.
//
// Every collective of a hierarchical group ends with a barrier of its
// members on Inter (a fence), so that no member returns from it, and
// perhaps closes its groups, while another still sends what the
// collective owes it: one barrier's latency on the network per
// collective, only for groups that mix hosts.
//
// # Failure
//
// Errors come from the transports: a dead rank is named with its world
// rank (Intra's WorldRanks). When an operation fails, its group aborts its
// intra-host groups with the same error (comm/shm's Abort), so a host's
// ranks that wait in shared memory for a peer that waits on the network
// fail too, naming the original.
package hier
