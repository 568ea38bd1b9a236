// Steps of data-parallel training over a star of hosts, simulated message by message: what the
// closed-form allreduce costs cannot see on a link shaped by a tbf token bucket (the bucket
// refills while the ranks compute, and again while a link waits for the other direction), and
// messages that share one host's link. Pure arithmetic: no MPI. docs/cluster.md ("Shaped links,
// simulated") has the model and its check against emulated hosts.
#pragma once

#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "cnnbench/collective_model.hpp"

namespace cnnbench {

// One round of one rank in an allreduce's schedule: its sends and receives start together, the
// round ends when all have finished and the rank has added `reduce_bytes` into its result.
struct ScheduleRound {
  std::vector<std::pair<int, double>> sends;     // (to rank, bytes)
  std::vector<std::pair<int, double>> receives;  // (from rank, bytes)
  double reduce_bytes = 0;
};
using RankSchedule = std::vector<ScheduleRound>;

// Every rank's rounds of one allreduce of `bytes` over `ranks` ranks, as Open MPI schedules
// `algorithm`: ring (2(p-1) rounds of n/p, a reduction after each of the first p-1),
// recursive_doubling and rabenseifner (the r extra ranks of a non-power of two folded in first,
// as allreduce_seconds prices them), binomial (libnbc's tree reduce to rank 0, then its
// broadcast with each rank sending to all its children in one round), nonoverlapping (priced as
// the binomial trees), basic_linear (every rank to rank 0 and back). Error for open_mpi_default:
// name the algorithm that runs.
std::vector<RankSchedule> allreduce_schedule(AllreduceAlgorithm algorithm, int ranks, double bytes);

// tbf on a link (scripts/emulate-hosts.sh shapes every host's egress and the switch's port to
// it): tokens are wire bytes, refilled at the rate up to the burst; a message passes at the
// host's own speed while the bucket holds tokens and at the rate once it is empty.
struct ShapedLink {
  double rate_bytes_per_s = 0;  // on the wire
  double burst_bytes = 0;
  // Wire bytes per payload byte: a full TCP segment at MTU 1500 carries 1448 bytes of payload
  // (20 IPv4 + 32 TCP with timestamps) in 1514 bytes with its Ethernet header, what tbf counts.
  double wire_bytes_per_byte = 1514.0 / 1448.0;
};

// Hosts on one switch, one rank each. `link` is a host's link without shaping: alpha per
// message, 1/beta the speed one message gets alone, gamma the reduction's seconds per byte.
struct StarNetwork {
  int hosts = 2;
  CollectiveCost link;
  std::optional<ShapedLink> shaping;
};

struct SimulatedStep {
  double step_s = 0;           // steady state: the mean over the last quarter of the steps
  double communication_s = 0;  // step_s less compute_s
  double first_step_s = 0;     // until the last rank finished the first step's allreduces
};

// `steps` training steps: compute_s on every rank, then every allreduce of `allreduces`
// (algorithm, bytes) started at once, as the cluster strategy's MPI_Iallreduce requests are; a
// rank computes its next step when its allreduces are done. A message moves once both its ranks
// have reached its round, after the link's alpha; messages crossing one link share it equally.
// steps = 0: enough for the buckets' steady state, 16 and at least four times the steps whose
// traffic a full burst covers (at most 4096).
SimulatedStep simulate_steps(const StarNetwork& network, double compute_s,
                             std::span<const std::pair<AllreduceAlgorithm, double>> allreduces,
                             int steps = 0);

}  // namespace cnnbench
