// A performance model of one ZeRO training step: compute time from a FLOP rate, and the
// stage's collectives under a latency/bandwidth (alpha-beta) model of ring algorithms,
// hierarchical when the ranks span nodes. Pure arithmetic, like estimate/model_states.h: it
// predicts step times for machines and rank counts far beyond the one running it
// (triad-estimate --time), and, calibrated on this machine, next to measured step times
// (triad-bench scaling).
//
// Note [Step time model]. Ψ parameters (P of them kept whole by stage 3's persistence
// threshold), n ranks, e bytes per parameter/gradient element, m micro-batches per step.
//
//   compute   = flops_per_token · tokens_per_rank / flops_per_rank · oversubscription
//               (flops_per_token = 6Ψ + 6·L·C·T, docs/benchmarks.md's count); forward one third,
//               backward two thirds. oversubscription = max(1, ranks on a node ×
//               threads per rank / cores_per_node) when cores_per_node is set: ranks
//               sharing cores compute in turns. It scales the communication too: on a CPU
//               the copies of a shared-memory transport are made by the same cores.
//   ring cost of one collective over p ranks of one link (α latency, β bandwidth), S the
//   bytes nccl-tests calls the size (all-reduce: the buffer; reduce-scatter: the total
//   input; all-gather: the total output):
//               all-reduce       2(p−1)·α + 2(p−1)/p · S/β
//               reduce-scatter    (p−1)·α +  (p−1)/p · S/β
//               all-gather        (p−1)·α +  (p−1)/p · S/β
//   hierarchical, n = g ranks per node × k nodes: reduce-scatter inside the node, the
//   inter-node collective on the S/g piece (g such rings at once, one per local rank, each
//   on that rank's share of the network), all-gather inside the node. All-reduce
//               2·[(g−1)·α_i + (g−1)/g · S/β_i] + 2(k−1)·α_e + 2(k−1)/k · (S/g)/β_e
//   and reduce-scatter / all-gather one half of that each.
//   A phase issued as c calls (one per flat parameter group) pays the latency c times and
//   the bandwidth term once for the whole volume.
//
//   per step, what each stage moves (ZeRO; zero_optimizer.h):
//     stage 0  all-reduce of Ψe                      during the backward (overlappable)
//     stage 1  reduce-scatter of Ψe, all-gather Ψe   at the step (exposed)
//     stage 2  reduce-scatter of Ψe per micro-batch  during the backward (overlappable);
//              all-gather of Ψe                      at the step (exposed)
//     stage 3  all-gather of (Ψ−P)e per micro-batch  during the forward (overlappable),
//              all-gather + reduce-scatter of (Ψ−P)e during the backward (overlappable);
//              the persistent P as stage 2: reduce-scatter per micro-batch in the
//              backward, all-gather at the step
//     stages 1-3 also all-reduce the gradient norm (8 bytes) at the step.
//   Bus bytes (nccl-tests) follow: 2Ψe(n−1)/n in stages 0-2, (3(Ψ−P) + 2P)e(n−1)/n in 3.
//
//   step = forward + backward + exposed step communication, where with overlap_comm an
//   overlappable phase costs max(its compute, its communication) and without it the sum.
//   Overlap needs communication that progresses in the background at full speed (a GPU's
//   copy engines under NCCL, an MPI progress thread): Cluster::background_progress. Where
//   a collective moves only while its rank waits on it (MPI between CPU ranks without a
//   progress thread), nothing overlaps, whatever overlap_comm says. The optimizer's own
//   arithmetic (a few passes over Ψ/n elements) is not modelled: a calibrated rate
//   measured on whole steps includes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace triad::estimate {

// One class of link between ranks.
struct Link {
  double bandwidth = 0;  // bytes/s each rank moves per direction: the busbw a large ring reaches
  double latency = 0;    // seconds per ring step (α)
};

// The machine: how ranks are placed on nodes and what each part costs. Defaults describe
// an 8-GPU node with NVLink (900 GB/s, 3 µs) and 200 Gb/s InfiniBand per GPU (5 µs);
// flops_per_rank has no default (0: unknown).
struct Cluster {
  int64_t ranks_per_node = 8;  // consecutive ranks share a node; nodes are filled in order
  int64_t cores_per_node = 0;  // compute units a node's ranks share (CPU cores); 0: one per rank
  double flops_per_rank = 0;   // FLOP/s one rank achieves alone on a training step
  // Communication proceeds while ranks compute (Note [Step time model]): true for NCCL on
  // GPUs; false for MPI between CPU ranks without a progress thread.
  bool background_progress = true;
  Link intra_node{900e9, 3e-6};
  Link inter_node{200e9 / 8, 5e-6};
};

enum class Collective { all_reduce, reduce_scatter, all_gather };
const char* collective_name(Collective c);

// Ring time of one collective of `bytes` (nccl-tests' S) over `ranks` ranks of `cluster`,
// hierarchical when they span nodes; 0 for one rank. Throws Error for a bad argument or
// ranks that do not fill whole nodes.
double collective_time(Collective c, double bytes, int64_t ranks, const Cluster& cluster);
// nccl-tests' bus bytes of the same: S·2(n−1)/n (all-reduce) or S·(n−1)/n.
double collective_bus_bytes(Collective c, double bytes, int64_t ranks);

// Note [Step time model] for one step on one rank.
struct StepModelInput {
  int stage = 0;                 // ZeRO stage, 0..3
  int64_t ranks = 1;             // data-parallel ranks
  double num_params = 0;         // Ψ
  double persistent_params = 0;  // stage 3: elements kept whole on every rank (P)
  double element_bytes = 4;      // e: bytes of a parameter or gradient element (dtype)
  double flops_per_token = 0;    // 6Ψ + 6·L·C·T
  double tokens_per_rank = 0;    // tokens one rank processes per optimizer step (all micro-batches)
  int64_t micro_batches = 1;     // gradient accumulation steps
  int64_t groups = 1;            // collective calls per phase (flat parameter groups)
  int64_t threads_per_rank = 1;  // for the oversubscription factor
  bool overlap_comm = true;      // zero_optimization.overlap_comm
};

// One communication phase of a step.
struct CommPhase {
  std::string what;  // "gradient all-reduce", ...
  std::string when;  // "forward", "backward" or "step"
  Collective op = Collective::all_reduce;
  double bytes = 0;         // S per call summed over the step's calls
  int64_t calls = 0;        // calls per step
  double seconds = 0;       // ring time of all of them (scaled by oversubscription)
  double bus_bytes = 0;     // per rank per step
  bool overlapped = false;  // hidden behind compute (up to the compute it overlaps)
};

struct StepEstimate {
  double oversubscription = 1;  // factor on compute and communication
  double compute_s = 0, forward_compute_s = 0, backward_compute_s = 0;
  double forward_comm_s = 0, backward_comm_s = 0, step_comm_s = 0;
  double forward_s = 0, backward_s = 0;  // with overlap applied
  double comm_s = 0;                     // all communication
  double exposed_comm_s = 0;             // step_s − compute_s
  double step_s = 0;
  double bus_bytes = 0;  // per rank per step
  std::vector<CommPhase> phases;
};

// Throws Error naming the field for a bad input (or a cluster without flops_per_rank).
StepEstimate estimate_step_time(const StepModelInput& input, const Cluster& cluster);

// --- calibration ---

// One measured collective: its time per call on `ranks` ranks of one link.
struct CollectiveSample {
  Collective op = Collective::all_reduce;
  int64_t ranks = 2;
  double bytes = 0;  // nccl-tests' S
  double seconds = 0;
  double oversubscription = 1;  // the run's factor (Note [Step time model]); the ring cost is divided out of it
};
// α and β of the single link all samples ran over (ranks on one node), by least squares on
// the ring costs above, each sample weighted by 1/its time (so every size counts by its
// relative error). Negative fits are clamped: α to 0 (then β refitted), 1/β to 0 (β = inf).
// Throws Error when no sample has ranks > 1.
Link fit_link(const std::vector<CollectiveSample>& samples);

}  // namespace triad::estimate
