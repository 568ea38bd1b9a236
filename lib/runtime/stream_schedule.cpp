// Static scheduling of a stream graph: the steady-state repetition vector, the initialisation
// schedule for peeking inputs, partitioning onto cores (LPT + traffic-cutting refinement) and
// stage assignment.
#include <algorithm>
#include <map>
#include <numeric>
#include <queue>

#include "cnnbench/core.hpp"
#include "cnnbench/stream.hpp"

namespace cnnbench::stream {

namespace {

// A positive rational num/den in lowest terms.
struct Ratio {
  std::int64_t num = 0, den = 1;
};
Ratio reduced(std::int64_t num, std::int64_t den) {
  const std::int64_t g = std::gcd(num, den);
  return {num / g, den / g};
}

}  // namespace

// Balance equations: for every edge, firings(from) x push = firings(to) x pop. Walk the graph from
// each unvisited actor fixing firings as rationals, check every edge met again, then scale to the
// smallest integers per connected component.
Schedule make_schedule(const Graph& graph) {
  const std::size_t n = graph.actors.size();
  std::vector<Ratio> firings(n);
  std::vector<std::vector<int>> incident(n);
  for (std::size_t e = 0; e < graph.edges.size(); ++e) {
    incident[graph.edges[e].from].push_back(static_cast<int>(e));
    incident[graph.edges[e].to].push_back(static_cast<int>(e));
  }
  std::vector<int> component(n, -1);
  int components = 0;
  for (std::size_t start = 0; start < n; ++start) {
    if (component[start] >= 0) continue;
    const int id = components++;
    firings[start] = {1, 1};
    component[start] = id;
    std::queue<int> todo;
    todo.push(static_cast<int>(start));
    while (!todo.empty()) {
      const int a = todo.front();
      todo.pop();
      for (int e : incident[a]) {
        const Edge& edge = graph.edges[e];
        const std::int64_t push = graph.actors[edge.from]->outputs()[edge.from_port].rate;
        const std::int64_t pop = graph.actors[edge.to]->inputs()[edge.to_port].rate;
        // firings(to) = firings(from) * push / pop, and back.
        const bool forward = edge.from == a;
        const int other = forward ? edge.to : edge.from;
        const Ratio mine = firings[a];
        const Ratio expected = forward ? reduced(mine.num * push, mine.den * pop)
                                       : reduced(mine.num * pop, mine.den * push);
        if (component[other] < 0) {
          component[other] = id;
          firings[other] = expected;
          todo.push(other);
          continue;
        }
        const Ratio& found = firings[other];
        CNNBENCH_CHECK(found.num == expected.num && found.den == expected.den,
                       "stream graph rates don't balance on edge '" + graph.edge_name(edge) +
                           "': " + graph.actors[edge.from]->name() + " pushes " +
                           std::to_string(push) + " tokens per firing and " +
                           graph.actors[edge.to]->name() + " pops " + std::to_string(pop) +
                           ", but the other paths between them fire them in another ratio");
      }
    }
  }
  Schedule schedule;
  schedule.steady.assign(n, 0);
  for (int id = 0; id < components; ++id) {
    std::int64_t lcm_den = 1;
    for (std::size_t a = 0; a < n; ++a) {
      if (component[a] == id) lcm_den = std::lcm(lcm_den, firings[a].den);
    }
    std::int64_t common = 0;
    for (std::size_t a = 0; a < n; ++a) {
      if (component[a] != id) continue;
      schedule.steady[a] = firings[a].num * (lcm_den / firings[a].den);
      common = std::gcd(common, schedule.steady[a]);
    }
    for (std::size_t a = 0; a < n; ++a) {
      if (component[a] == id) schedule.steady[a] /= common;
    }
  }
  // Initialisation: walking consumers before producers, a producer fires often enough that each
  // peeking consumer can run its own init firings and still see peek - pop tokens ahead. A
  // feedback edge's consumer sees its initial tokens instead.
  schedule.init.assign(n, 0);
  const std::vector<int> order = graph.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int a = *it;
    for (const Edge& edge : graph.edges) {
      if (edge.from != a || edge.feedback) continue;
      const Port& in = graph.actors[edge.to]->inputs()[edge.to_port];
      const std::int64_t push = graph.actors[a]->outputs()[edge.from_port].rate;
      const std::int64_t needed = schedule.init[edge.to] * in.rate + (in.window() - in.rate);
      schedule.init[a] = std::max(schedule.init[a], (needed + push - 1) / push);
    }
  }
  return schedule;
}

// ---- partitioning -----------------------------------------------------------------------------

double busiest_core_work(std::span<const double> work, std::span<const int> core_of, int cores) {
  std::vector<double> load(static_cast<std::size_t>(cores), 0.0);
  for (std::size_t u = 0; u < work.size(); ++u) load[core_of[u]] += work[u];
  return *std::max_element(load.begin(), load.end());
}

double cross_core_bytes(std::span<const Traffic> traffic, std::span<const int> core_of) {
  double bytes = 0;
  for (const Traffic& t : traffic) {
    if (core_of[t.a] != core_of[t.b]) bytes += t.bytes;
  }
  return bytes;
}

std::vector<int> assign_cores(std::span<const double> work, std::span<const Traffic> traffic,
                              int cores, double tolerance) {
  CNNBENCH_CHECK(cores >= 1, "partitioning needs at least one core, got " + std::to_string(cores));
  const std::size_t n = work.size();
  std::vector<int> core_of(n, 0);
  std::vector<double> load(static_cast<std::size_t>(cores), 0.0);
  // Longest processing time first: the heaviest unit goes to the least loaded core (ties: the
  // lower core, so results are reproducible).
  std::vector<int> by_work(n);
  std::iota(by_work.begin(), by_work.end(), 0);
  std::stable_sort(by_work.begin(), by_work.end(), [&](int x, int y) { return work[x] > work[y]; });
  for (int u : by_work) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    core_of[u] = static_cast<int>(lightest);
    load[lightest] += work[u];
  }
  // Refinement: move single units to the core that cuts the most traffic, then swap pairs, as
  // long as the busiest core stays within the tolerance of the greedy result.
  const double limit = busiest_core_work(work, core_of, cores) * (1.0 + tolerance);
  std::vector<std::vector<std::pair<int, double>>> neighbours(n);
  for (const Traffic& t : traffic) {
    neighbours[t.a].push_back({t.b, t.bytes});
    neighbours[t.b].push_back({t.a, t.bytes});
  }
  for (int pass = 0; pass < 32; ++pass) {
    bool improved = false;
    for (std::size_t u = 0; u < n; ++u) {
      std::vector<double> bytes_to(static_cast<std::size_t>(cores), 0.0);
      for (const auto& [v, bytes] : neighbours[u]) bytes_to[core_of[v]] += bytes;
      const int from = core_of[u];
      int best = from;
      double best_gain = 1e-9;
      for (int to = 0; to < cores; ++to) {
        if (to == from || load[to] + work[u] > limit) continue;
        const double gain = bytes_to[to] - bytes_to[from];
        if (gain > best_gain) {
          best = to;
          best_gain = gain;
        }
      }
      if (best != from) {
        load[from] -= work[u];
        load[best] += work[u];
        core_of[u] = best;
        improved = true;
      }
    }
    // Pairwise swaps reach what single moves can't when every unit weighs the same.
    for (std::size_t u = 0; u < n; ++u) {
      for (std::size_t v = u + 1; v < n; ++v) {
        const int a = core_of[u], b = core_of[v];
        if (a == b || load[a] - work[u] + work[v] > limit || load[b] - work[v] + work[u] > limit)
          continue;
        const double before = cross_core_bytes(traffic, core_of);
        std::swap(core_of[u], core_of[v]);
        if (cross_core_bytes(traffic, core_of) < before - 1e-9) {
          load[a] += work[v] - work[u];
          load[b] += work[u] - work[v];
          improved = true;
        } else {
          std::swap(core_of[u], core_of[v]);
        }
      }
    }
    if (!improved) break;
  }
  return core_of;
}

std::vector<int> assign_stages(const Graph& graph, std::span<const int> core_of) {
  std::vector<int> stage(graph.actors.size(), 0);
  for (int a : graph.topological_order()) {
    for (const Edge& edge : graph.edges) {
      if (edge.to != a || edge.feedback) continue;
      const int hop = core_of[edge.from] != core_of[a] ? 1 : 0;
      stage[a] = std::max(stage[a], stage[edge.from] + hop);
    }
  }
  return stage;
}

namespace {

Partition describe(const Graph& graph, const Schedule& schedule, int cores,
                   std::vector<int> core_of) {
  Partition partition;
  partition.cores = cores;
  partition.core_of = std::move(core_of);
  partition.stage_of = assign_stages(graph, partition.core_of);
  partition.core_work.assign(static_cast<std::size_t>(cores), 0.0);
  for (std::size_t a = 0; a < graph.actors.size(); ++a) {
    const double work = graph.actors[a]->work_estimate() * static_cast<double>(schedule.steady[a]);
    partition.core_work[partition.core_of[a]] += work;
    partition.total_work += work;
  }
  const double busiest = *std::max_element(partition.core_work.begin(), partition.core_work.end());
  partition.predicted_speedup = busiest > 0 ? partition.total_work / busiest : 1.0;
  for (const Edge& edge : graph.edges) {
    if (partition.core_of[edge.from] == partition.core_of[edge.to]) continue;
    const Port& out = graph.actors[edge.from]->outputs()[edge.from_port];
    partition.cross_core_bytes += static_cast<double>(schedule.steady[edge.from]) * out.rate *
                                  static_cast<double>(out.token_bytes());
  }
  return partition;
}

}  // namespace

Partition partition_graph(const Graph& graph, const Schedule& schedule, int cores,
                          double tolerance) {
  // Units: one per placement key, one per unkeyed actor.
  std::vector<int> unit_of(graph.actors.size());
  std::map<std::string, int> keyed;
  std::vector<double> work;
  for (std::size_t a = 0; a < graph.actors.size(); ++a) {
    const Actor& actor = *graph.actors[a];
    const double seconds = actor.work_estimate() * static_cast<double>(schedule.steady[a]);
    if (!actor.placement().empty()) {
      const auto [it, fresh] = keyed.emplace(actor.placement(), static_cast<int>(work.size()));
      if (fresh) work.push_back(0.0);
      unit_of[a] = it->second;
    } else {
      unit_of[a] = static_cast<int>(work.size());
      work.push_back(0.0);
    }
    work[unit_of[a]] += seconds;
  }
  std::vector<Traffic> traffic;
  for (const Edge& edge : graph.edges) {
    if (unit_of[edge.from] == unit_of[edge.to]) continue;
    const Port& out = graph.actors[edge.from]->outputs()[edge.from_port];
    traffic.push_back({unit_of[edge.from], unit_of[edge.to],
                       static_cast<double>(schedule.steady[edge.from]) * out.rate *
                           static_cast<double>(out.token_bytes())});
  }
  const std::vector<int> unit_core = assign_cores(work, traffic, cores, tolerance);
  std::vector<int> core_of(graph.actors.size());
  for (std::size_t a = 0; a < graph.actors.size(); ++a) core_of[a] = unit_core[unit_of[a]];
  return describe(graph, schedule, cores, std::move(core_of));
}

Partition single_core_partition(const Graph& graph, const Schedule& schedule) {
  return describe(graph, schedule, 1, std::vector<int>(graph.actors.size(), 0));
}

}  // namespace cnnbench::stream
