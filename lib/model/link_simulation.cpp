// Training steps over a star of hosts, simulated as fluid messages: allreduce schedules round by
// round, links shared equally by the messages crossing them, tbf buckets draining and refilling.
#include "cnnbench/link_simulation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "cnnbench/core.hpp"
#include "rank_log2.hpp"

namespace cnnbench {

namespace {

constexpr double never = std::numeric_limits<double>::infinity();

// The rounds of every rank, built by adding messages to them.
class ScheduleBuilder {
 public:
  explicit ScheduleBuilder(int ranks) : ranks_(static_cast<std::size_t>(ranks)) {}
  // A new round on `rank`, returned for adding to.
  ScheduleRound& round(int rank) { return ranks_[static_cast<std::size_t>(rank)].emplace_back(); }
  // One round on each of two ranks that send each other `bytes` (and reduce `reduce` of them).
  void exchange(int a, int b, double bytes, double reduce) {
    for (const auto& [self, peer] : {std::pair{a, b}, std::pair{b, a}}) {
      ScheduleRound& r = round(self);
      r.sends.emplace_back(peer, bytes);
      r.receives.emplace_back(peer, bytes);
      r.reduce_bytes = reduce;
    }
  }
  void send(int from, int to, double bytes, double reduce) {
    round(from).sends.emplace_back(to, bytes);
    ScheduleRound& r = round(to);
    r.receives.emplace_back(from, bytes);
    r.reduce_bytes = reduce;
  }
  std::vector<RankSchedule> take() { return std::move(ranks_); }

 private:
  std::vector<RankSchedule> ranks_;
};

// libnbc's allred_sched_diss with root 0.
std::vector<RankSchedule> binomial_schedule(int p, double n) {
  const int rounds = ceil_log2(p);
  std::vector<RankSchedule> ranks(static_cast<std::size_t>(p));
  for (int v = 0; v < p; ++v) {
    RankSchedule& mine = ranks[static_cast<std::size_t>(v)];
    for (int r = 1; r <= rounds; ++r) {
      if (v % (1 << r) == 0) {
        const int child = v + (1 << (r - 1));
        if (child < p) mine.push_back({{}, {{child, n}}, n});
      } else {
        mine.push_back({{{v - (1 << (r - 1)), n}}, {}, 0});
        break;
      }
    }
    if (v != 0) mine.push_back({{}, {{v - (1 << floor_log2(v)), n}}, 0});
    ScheduleRound children;
    for (int r = 0; r < rounds; ++r) {
      if (v < (1 << r) && v + (1 << r) < p) children.sends.emplace_back(v + (1 << r), n);
    }
    if (!children.sends.empty()) mine.push_back(children);
  }
  return ranks;
}

std::vector<RankSchedule> ring_schedule(int p, double n) {
  std::vector<RankSchedule> ranks(static_cast<std::size_t>(p));
  const double block = n / p;
  for (int r = 0; r < p; ++r) {
    for (int round = 0; round < 2 * (p - 1); ++round) {
      ranks[static_cast<std::size_t>(r)].push_back(
          {{{(r + 1) % p, block}}, {{(r + p - 1) % p, block}}, round < p - 1 ? block : 0});
    }
  }
  return ranks;
}

// The rank that plays virtual rank v of the power-of-two part after the r extra ranks folded in:
// the odd one of each of the first r pairs, then the rest.
int folded_rank(int v, int extra) { return v < extra ? 2 * v + 1 : v + extra; }

std::vector<RankSchedule> recursive_doubling_schedule(int p, double n) {
  ScheduleBuilder s(p);
  const int q = 1 << floor_log2(p), extra = p - q;
  for (int e = 0; e < 2 * extra; e += 2) s.send(e, e + 1, n, n);
  for (int distance = 1; distance < q; distance <<= 1) {
    for (int v = 0; v < q; ++v) {
      if (v < (v ^ distance)) s.exchange(folded_rank(v, extra), folded_rank(v ^ distance, extra), n, n);
    }
  }
  for (int e = 0; e < 2 * extra; e += 2) s.send(e + 1, e, n, 0);
  return s.take();
}

std::vector<RankSchedule> rabenseifner_schedule(int p, double n) {
  ScheduleBuilder s(p);
  const int steps = floor_log2(p), q = 1 << steps, extra = p - q;
  for (int e = 0; e < 2 * extra; e += 2) {
    s.exchange(e, e + 1, n / 2, n / 2);  // each keeps and reduces one half
    s.send(e, e + 1, n / 2, 0);          // the odd rank then holds both reduced halves
  }
  for (int k = 1; k <= steps; ++k) {  // reduce-scatter by recursive halving
    const int distance = q >> k;
    for (int v = 0; v < q; ++v) {
      if (v < (v ^ distance)) {
        s.exchange(folded_rank(v, extra), folded_rank(v ^ distance, extra), n / (1 << k), n / (1 << k));
      }
    }
  }
  for (int k = steps; k >= 1; --k) {  // allgather by recursive doubling
    const int distance = q >> k;
    for (int v = 0; v < q; ++v) {
      if (v < (v ^ distance)) s.exchange(folded_rank(v, extra), folded_rank(v ^ distance, extra), n / (1 << k), 0);
    }
  }
  for (int e = 0; e < 2 * extra; e += 2) s.send(e + 1, e, n, 0);
  return s.take();
}

std::vector<RankSchedule> basic_linear_schedule(int p, double n) {
  ScheduleBuilder s(p);
  for (int r = 1; r < p; ++r) s.send(r, 0, n, n);
  ScheduleRound& broadcast = s.round(0);
  for (int r = 1; r < p; ++r) broadcast.sends.emplace_back(r, n);
  for (int r = 1; r < p; ++r) s.round(r).receives.emplace_back(0, n);
  return s.take();
}

// ---- the simulation ------------------------------------------------------------------------------

// One message of one allreduce, matched between its sender's and its receiver's rounds.
struct MessageTemplate {
  int from = 0, to = 0;
  double bytes = 0;
  int allreduce = 0;
  int send_round = 0, receive_round = 0;
};

struct MessageState {
  double posted_from = never, posted_to = never;
  double moving_at = never;  // both posted, plus alpha
  double remaining = 0;
  bool done = false;
};

struct RankState {
  int step = 0;
  bool computing = true;
  double compute_end = 0;
  std::vector<int> round;             // per allreduce: the round it is in
  std::vector<int> pending;           // per allreduce: unfinished messages of that round
  std::vector<double> round_end;      // per allreduce: when its reduction ends (pending == 0)
};

class StarSimulation {
 public:
  StarSimulation(const StarNetwork& network, double compute_s,
                 std::span<const std::pair<AllreduceAlgorithm, double>> allreduces, int steps)
      : net_(network), compute_s_(compute_s), steps_(steps) {
    for (const auto& [algorithm, bytes] : allreduces) {
      schedules_.push_back(allreduce_schedule(algorithm, network.hosts, bytes));
    }
    match_messages();
    ranks_.resize(static_cast<std::size_t>(network.hosts));
    for (RankState& r : ranks_) {
      r.compute_end = compute_s;
      r.round.assign(schedules_.size(), 0);
      r.pending.assign(schedules_.size(), 0);
      r.round_end.assign(schedules_.size(), never);
    }
    const std::size_t links = 2 * ranks_.size();  // egress of host h: h; switch port to h: hosts + h
    tokens_.assign(links, net_.shaping ? net_.shaping->burst_bytes : 0);
    throttled_.assign(links, net_.shaping && net_.shaping->burst_bytes <= frame);
    step_ends_.assign(static_cast<std::size_t>(steps), 0);
  }

  SimulatedStep run() {
    double t = 0;
    while (!finished()) {
      settle(t);
      if (finished()) break;
      const std::vector<double> rates = flow_rates(t);
      const std::vector<double> used = link_use(rates);
      const double next = next_event(t, rates, used);
      CNNBENCH_CHECK(next < never, "link simulation: no rank can go on (the schedule's sends and "
                                   "receives do not match)");
      advance(t, next, rates, used);
      t = next;
    }
    const int from = steps_ - std::max(1, steps_ / 4);
    SimulatedStep out;
    out.step_s = (step_ends_.back() - step_ends_[static_cast<std::size_t>(from - 1)]) / (steps_ - from);
    out.communication_s = out.step_s - compute_s_;
    out.first_step_s = first_step_end_;
    return out;
  }

 private:
  void match_messages() {
    // The k-th send from a to b within one allreduce meets the k-th receive at b from a.
    for (std::size_t c = 0; c < schedules_.size(); ++c) {
      std::map<std::pair<int, int>, std::vector<std::pair<int, double>>> sends, receives;
      for (int rank = 0; rank < net_.hosts; ++rank) {
        const RankSchedule& rounds = schedules_[c][static_cast<std::size_t>(rank)];
        for (std::size_t i = 0; i < rounds.size(); ++i) {
          for (const auto& [to, bytes] : rounds[i].sends) sends[{rank, to}].emplace_back(int(i), bytes);
          for (const auto& [from, bytes] : rounds[i].receives) receives[{from, rank}].emplace_back(int(i), bytes);
        }
      }
      CNNBENCH_CHECK(sends.size() == receives.size(), "link simulation: a schedule sends to no receiver");
      for (const auto& [pair, list] : sends) {
        const auto& matching = receives[pair];
        CNNBENCH_CHECK(matching.size() == list.size(), "link simulation: a schedule's sends and receives differ");
        for (std::size_t k = 0; k < list.size(); ++k) {
          templates_.push_back({pair.first, pair.second, list[k].second, int(c), list[k].first, matching[k].first});
        }
      }
    }
    by_round_.resize(schedules_.size());
    for (std::size_t c = 0; c < schedules_.size(); ++c) {
      by_round_[c].resize(static_cast<std::size_t>(net_.hosts));
      for (int rank = 0; rank < net_.hosts; ++rank) {
        by_round_[c][static_cast<std::size_t>(rank)].resize(schedules_[c][static_cast<std::size_t>(rank)].size());
      }
    }
    for (std::size_t m = 0; m < templates_.size(); ++m) {
      const MessageTemplate& x = templates_[m];
      by_round_[std::size_t(x.allreduce)][std::size_t(x.from)][std::size_t(x.send_round)].push_back(m);
      by_round_[std::size_t(x.allreduce)][std::size_t(x.to)][std::size_t(x.receive_round)].push_back(m);
    }
  }

  bool finished() const {
    return std::all_of(ranks_.begin(), ranks_.end(), [&](const RankState& r) { return r.step >= steps_; });
  }

  MessageState& message(int step, std::size_t m) {
    if (messages_.size() <= static_cast<std::size_t>(step)) messages_.resize(static_cast<std::size_t>(step) + 1);
    auto& states = messages_[static_cast<std::size_t>(step)];
    if (states.empty()) {
      undone_.resize(messages_.size(), 0);
      undone_[static_cast<std::size_t>(step)] = templates_.size();
      states.resize(templates_.size());
      for (std::size_t i = 0; i < templates_.size(); ++i) states[i].remaining = templates_[i].bytes;
    }
    return states[m];
  }

  void enter_round(int rank, std::size_t c, double t) {
    RankState& r = ranks_[static_cast<std::size_t>(rank)];
    const auto& list = by_round_[c][static_cast<std::size_t>(rank)][static_cast<std::size_t>(r.round[c])];
    r.pending[c] = static_cast<int>(list.size());
    const ScheduleRound& round = schedules_[c][static_cast<std::size_t>(rank)][static_cast<std::size_t>(r.round[c])];
    r.round_end[c] = list.empty() ? t + round.reduce_bytes * net_.link.gamma_s_per_byte : never;
    for (std::size_t m : list) {
      MessageState& s = message(r.step, m);
      (templates_[m].from == rank ? s.posted_from : s.posted_to) = t;
      if (s.posted_from < never && s.posted_to < never) {
        s.moving_at = std::max(s.posted_from, s.posted_to) + cost_of(templates_[m]).alpha_s;
      }
    }
  }

  // Everything that happens at t without time passing: computes ending, rounds ending, steps ending.
  void settle(double t) {
    const double due = t + 1e-12 * std::max(1.0, t);
    for (bool changed = true; changed;) {
      changed = false;
      for (int rank = 0; rank < net_.hosts; ++rank) {
        RankState& r = ranks_[static_cast<std::size_t>(rank)];
        if (r.step >= steps_) continue;
        if (r.computing) {
          if (r.compute_end > due) continue;
          r.computing = false;
          for (std::size_t c = 0; c < schedules_.size(); ++c) {
            r.round[c] = 0;
            if (!schedules_[c][static_cast<std::size_t>(rank)].empty()) enter_round(rank, c, t);
          }
          changed = true;
        }
        bool all_done = true;
        for (std::size_t c = 0; c < schedules_.size(); ++c) {
          const auto rounds = static_cast<int>(schedules_[c][static_cast<std::size_t>(rank)].size());
          while (r.round[c] < rounds && r.pending[c] == 0 && r.round_end[c] <= due) {
            if (++r.round[c] < rounds) enter_round(rank, c, t);
            changed = true;
          }
          all_done = all_done && r.round[c] >= rounds;
        }
        if (all_done) {
          if (rank == 0) step_ends_[static_cast<std::size_t>(r.step)] = t;
          if (r.step == 0) first_step_end_ = std::max(first_step_end_, t);
          ++r.step;
          r.computing = true;
          r.compute_end = t + compute_s_;
          changed = true;
        }
      }
    }
  }

  std::size_t egress(int host) const { return static_cast<std::size_t>(host); }
  std::size_t port(int host) const { return static_cast<std::size_t>(net_.hosts + host); }

  // A message's alpha and beta: eager or rendezvous by its size.
  const LinkCost& cost_of(const MessageTemplate& m) const { return net_.link.link_for(m.bytes); }
  // The payload speed of one message alone on an unshaped link.
  double speed(const MessageTemplate& m) const {
    return cost_of(m).beta_s_per_byte > 0 ? 1 / cost_of(m).beta_s_per_byte : never;
  }

  // A link whose bucket ran dry (down to one full frame) passes only the rate until it holds two
  // frames again.
  static constexpr double frame = 1514;
  bool throttled(std::size_t link) const { return net_.shaping && throttled_[link]; }

  // Per live message (index into live_), its payload bytes per second.
  std::vector<double> flow_rates(double t) {
    live_.clear();
    for (std::size_t step = 0; step < messages_.size(); ++step) {
      for (std::size_t m = 0; m < templates_.size() && undone_[step] > 0; ++m) {
        const MessageState& s = messages_[step][m];
        if (!s.done && s.moving_at <= t + 1e-12 * std::max(1.0, t)) live_.emplace_back(step, m);
      }
    }
    std::vector<int> users(tokens_.size(), 0);
    for (const auto& [step, m] : live_) {
      ++users[egress(templates_[m].from)];
      ++users[port(templates_[m].to)];
    }
    std::vector<double> rates;
    for (const auto& [step, m] : live_) {
      const MessageTemplate& x = templates_[m];
      double rate = never;
      for (std::size_t link : {egress(x.from), port(x.to)}) {
        double capacity = speed(x);
        if (throttled(link)) capacity = std::min(capacity, net_.shaping->rate_bytes_per_s / net_.shaping->wire_bytes_per_byte);
        rate = std::min(rate, capacity / users[link]);
      }
      rates.push_back(rate);
    }
    return rates;
  }

  // `used`: payload bytes per second through each link (link_use of `rates`).
  double next_event(double t, const std::vector<double>& rates, const std::vector<double>& used) {
    double next = never;
    for (std::size_t i = 0; i < live_.size(); ++i) {
      const MessageState& s = messages_[live_[i].first][live_[i].second];
      next = std::min(next, rates[i] == never ? t : t + s.remaining / rates[i]);
    }
    for (std::size_t step = 0; step < messages_.size(); ++step) {
      if (undone_[step] == 0) continue;
      for (const MessageState& s : messages_[step]) {
        if (!s.done && s.moving_at > t && s.moving_at < never) next = std::min(next, s.moving_at);
      }
    }
    for (const RankState& r : ranks_) {
      if (r.step >= steps_) continue;
      if (r.computing) next = std::min(next, r.compute_end);
      for (std::size_t c = 0; c < r.round_end.size(); ++c) {
        if (r.pending[c] == 0 && r.round_end[c] > t) next = std::min(next, r.round_end[c]);
      }
    }
    if (net_.shaping) {  // a bucket running dry changes its link's speed
      for (std::size_t link = 0; link < tokens_.size(); ++link) {
        const double drain = used[link] * net_.shaping->wire_bytes_per_byte - net_.shaping->rate_bytes_per_s;
        if (!throttled(link) && drain > 0) next = std::min(next, t + std::max(0.0, tokens_[link] - frame) / drain);
        if (throttled(link) && drain < 0 && used[link] > 0) {
          next = std::min(next, t + std::max(0.0, 2 * frame - tokens_[link]) / -drain);
        }
      }
    }
    return next;
  }

  // Payload bytes per second through each link.
  std::vector<double> link_use(const std::vector<double>& rates) const {
    std::vector<double> used(tokens_.size(), 0.0);
    for (std::size_t i = 0; i < live_.size(); ++i) {
      used[egress(templates_[live_[i].second].from)] += rates[i];
      used[port(templates_[live_[i].second].to)] += rates[i];
    }
    return used;
  }

  void advance(double t, double next, const std::vector<double>& rates, const std::vector<double>& used) {
    const double dt = next - t;
    if (net_.shaping) {
      for (std::size_t link = 0; link < tokens_.size(); ++link) {
        const double fill = net_.shaping->rate_bytes_per_s - used[link] * net_.shaping->wire_bytes_per_byte;
        tokens_[link] = std::clamp(tokens_[link] + fill * dt, 0.0, net_.shaping->burst_bytes);
        const double slack = 1e-9 * frame;
        if (!throttled_[link] && tokens_[link] <= frame + slack) throttled_[link] = true;
        if (throttled_[link] && tokens_[link] >= std::min(2 * frame, net_.shaping->burst_bytes) - slack &&
            net_.shaping->burst_bytes > frame) {
          throttled_[link] = false;
        }
      }
    }
    for (std::size_t i = 0; i < live_.size(); ++i) {
      const auto [step, m] = live_[i];
      MessageState& s = messages_[step][m];
      s.remaining -= rates[i] == never ? s.remaining : rates[i] * dt;
      if (s.remaining > 1e-9 * templates_[m].bytes + 1e-9) continue;
      s.done = true;
      --undone_[step];
      const MessageTemplate& x = templates_[m];
      for (int rank : {x.from, x.to}) {
        RankState& r = ranks_[static_cast<std::size_t>(rank)];
        const auto c = static_cast<std::size_t>(x.allreduce);
        if (--r.pending[c] == 0) {
          const ScheduleRound& round = schedules_[c][static_cast<std::size_t>(rank)][static_cast<std::size_t>(r.round[c])];
          r.round_end[c] = next + round.reduce_bytes * net_.link.gamma_s_per_byte;
        }
      }
    }
  }

  const StarNetwork& net_;
  double compute_s_;
  int steps_;
  std::vector<std::vector<RankSchedule>> schedules_;  // per allreduce, per rank
  std::vector<MessageTemplate> templates_;
  std::vector<std::vector<std::vector<std::vector<std::size_t>>>> by_round_;  // [allreduce][rank][round]
  std::vector<std::vector<MessageState>> messages_;                           // [step][template]
  std::vector<std::size_t> undone_;                                           // [step]: messages left
  std::vector<RankState> ranks_;
  std::vector<double> tokens_;
  std::vector<bool> throttled_;
  std::vector<double> step_ends_;  // rank 0's
  double first_step_end_ = 0;      // the last rank's
  std::vector<std::pair<std::size_t, std::size_t>> live_;  // (step, template) moving now
};

// A full bucket lasts burst / (wire bytes a step sends through a link) steps, the least a host
// sends being one allreduce's payload's share; four times that, and 16 at least, reach the steady
// state the mean is taken over.
int steps_to_steady_state(const StarNetwork& network,
                          std::span<const std::pair<AllreduceAlgorithm, double>> allreduces) {
  constexpr int least = 16, most = 4096;
  if (!network.shaping) return least;
  double per_step = 0;
  for (const auto& entry : allreduces) per_step += entry.second / network.hosts;
  per_step *= network.shaping->wire_bytes_per_byte;
  if (per_step <= 0) return least;
  const double covered = network.shaping->burst_bytes / per_step;
  return static_cast<int>(std::clamp(4 * std::ceil(covered), double(least), double(most)));
}

}  // namespace

std::vector<RankSchedule> allreduce_schedule(AllreduceAlgorithm algorithm, int ranks, double bytes) {
  CNNBENCH_CHECK(ranks >= 1 && bytes >= 0, "allreduce schedule needs ranks >= 1 and bytes >= 0");
  if (ranks == 1) return std::vector<RankSchedule>(1);
  switch (algorithm) {
    case AllreduceAlgorithm::binomial:
    case AllreduceAlgorithm::nonoverlapping:
      return binomial_schedule(ranks, bytes);
    case AllreduceAlgorithm::ring:
    case AllreduceAlgorithm::segmented_ring:
      return ring_schedule(ranks, bytes);
    case AllreduceAlgorithm::recursive_doubling:
      return recursive_doubling_schedule(ranks, bytes);
    case AllreduceAlgorithm::rabenseifner:
      return rabenseifner_schedule(ranks, bytes);
    case AllreduceAlgorithm::basic_linear:
      return basic_linear_schedule(ranks, bytes);
    case AllreduceAlgorithm::open_mpi_default:
      break;
  }
  fail("allreduce schedule: name the algorithm that runs, not Open MPI's default");
}

SimulatedStep simulate_steps(const StarNetwork& network, double compute_s,
                             std::span<const std::pair<AllreduceAlgorithm, double>> allreduces, int steps) {
  CNNBENCH_CHECK(network.hosts >= 1 && network.hosts <= 4096, "link simulation: 1 to 4096 hosts");
  CNNBENCH_CHECK(compute_s >= 0 && (steps == 0 || steps >= 2),
                 "link simulation: compute >= 0 and at least 2 steps (or 0: until the steady state)");
  CNNBENCH_CHECK(!network.shaping || (network.shaping->rate_bytes_per_s > 0 && network.shaping->burst_bytes >= 0 &&
                                      network.shaping->wire_bytes_per_byte >= 1),
                 "link simulation: a shaped link needs a positive rate, a burst >= 0 and >= 1 wire byte per byte");
  if (steps == 0) steps = steps_to_steady_state(network, allreduces);
  return StarSimulation(network, compute_s, allreduces, steps).run();
}

}  // namespace cnnbench
