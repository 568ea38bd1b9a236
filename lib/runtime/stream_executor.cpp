// The phased stream executor: one pinned thread per core runs the actors placed there, in stage
// order, over bounded SPSC channels; and the profiling warm-up that measures each actor's work.
#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

#include "cnnbench/core.hpp"
#include "cnnbench/stream.hpp"
#include "cpu_relax.hpp"

namespace cnnbench::stream {

Executor::Executor(Graph graph, Schedule schedule, Partition partition, ExecutorOptions options)
    : graph_(std::move(graph)),
      schedule_(std::move(schedule)),
      partition_(std::move(partition)),
      options_(std::move(options)) {
  const std::size_t n = graph_.actors.size();
  CNNBENCH_CHECK(schedule_.steady.size() == n && partition_.core_of.size() == n,
                 "executor: schedule and partition don't match the graph");
  actor_inputs_.resize(n);
  actor_outputs_.resize(n);
  actor_input_edges_.resize(n);
  actor_output_edges_.resize(n);
  for (std::size_t a = 0; a < n; ++a) {
    actor_inputs_[a].assign(graph_.actors[a]->inputs().size(), nullptr);
    actor_outputs_[a].assign(graph_.actors[a]->outputs().size(), nullptr);
    actor_input_edges_[a].assign(actor_inputs_[a].size(), -1);
    actor_output_edges_[a].assign(actor_outputs_[a].size(), -1);
  }
  // Room for one steady-state iteration of the producer (plus slack, so that cores on different
  // stages decouple), the consumer's look-ahead, what the init schedule leaves behind and a
  // feedback edge's initial tokens, which are pushed here, once.
  for (std::size_t e = 0; e < graph_.edges.size(); ++e) {
    const Edge& edge = graph_.edges[e];
    const Port& out = graph_.actors[edge.from]->outputs()[edge.from_port];
    const Port& in = graph_.actors[edge.to]->inputs()[edge.to_port];
    const std::int64_t per_iteration = schedule_.steady[edge.from] * out.rate;
    const std::int64_t capacity =
        std::max<std::int64_t>({per_iteration * (1 + options_.slack_iterations) + in.window() +
                                    schedule_.init[edge.from] * out.rate + edge.initial_tokens,
                                in.retain, out.retain});
    channels_.push_back(std::make_unique<Channel>(static_cast<std::size_t>(capacity),
                                                  out.token_bytes()));
    channels_.back()->push(static_cast<std::size_t>(edge.initial_tokens));
    CNNBENCH_CHECK(actor_outputs_[edge.from][edge.from_port] == nullptr &&
                       actor_inputs_[edge.to][edge.to_port] == nullptr,
                   "executor: a port of edge '" + graph_.edge_name(edge) +
                       "' is connected twice");
    actor_outputs_[edge.from][edge.from_port] = channels_.back().get();
    actor_inputs_[edge.to][edge.to_port] = channels_.back().get();
    actor_output_edges_[edge.from][edge.from_port] = static_cast<int>(e);
    actor_input_edges_[edge.to][edge.to_port] = static_cast<int>(e);
  }
  for (std::size_t a = 0; a < n; ++a) {
    const bool open = std::count(actor_inputs_[a].begin(), actor_inputs_[a].end(), nullptr) +
                          std::count(actor_outputs_[a].begin(), actor_outputs_[a].end(), nullptr) >
                      0;
    CNNBENCH_CHECK(!open, "executor: actor '" + graph_.actors[a]->name() +
                              "' has a port that no edge connects");
  }
  // Each core's actors in stage order (ties: topological order), fused into one loop.
  core_actors_.resize(static_cast<std::size_t>(partition_.cores));
  const std::vector<int> order = graph_.topological_order();
  std::vector<int> rank(n);
  for (std::size_t i = 0; i < order.size(); ++i) rank[order[i]] = static_cast<int>(i);
  for (int a : order) core_actors_[partition_.core_of[a]].push_back(a);
  for (auto& actors : core_actors_) {
    std::stable_sort(actors.begin(), actors.end(), [&](int x, int y) {
      return partition_.stage_of[x] != partition_.stage_of[y]
                 ? partition_.stage_of[x] < partition_.stage_of[y]
                 : rank[x] < rank[y];
    });
  }
  reset_stats();
  actor_fired_.assign(n, 0);
  pins_.resize(static_cast<std::size_t>(partition_.cores));
  for (int core = 0; core < partition_.cores; ++core) {
    pins_[core].worker = options_.worker_prefix + std::to_string(core);
  }
}

Executor::~Executor() = default;

void Executor::reset_stats() {
  actor_stats_.assign(graph_.actors.size(), {});
  channel_stats_.assign(graph_.edges.size(), {});
  core_stats_.assign(static_cast<std::size_t>(partition_.cores), {});
  wall_seconds_ = 0;
}

double Executor::bubble_fraction() const {
  if (wall_seconds_ <= 0) return 0;
  double busy = 0;
  for (const CoreStats& core : core_stats_) busy += core.busy_seconds;
  return std::max(0.0, 1.0 - busy / (wall_seconds_ * partition_.cores));
}

void Executor::run(std::int64_t iterations) {
  CNNBENCH_CHECK(!broken_, "the stream executor stopped after an actor failed; rebuild it");
  CNNBENCH_CHECK(iterations >= 0, "executor: negative iteration count");
  abort_.store(false);
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const bool with_init = !initialised_;
  const double start = now_seconds();
  const ClockTicks run_start = clock_ticks();
  last_run_core_times_.assign(static_cast<std::size_t>(partition_.cores), StepTimes{});
  core_last_firing_end_.assign(static_cast<std::size_t>(partition_.cores), run_start);
  {
    std::vector<std::jthread> threads;
    for (int core = 0; core < partition_.cores; ++core) {
      threads.emplace_back([&, core] {
        try {
          run_core(core, iterations, with_init, run_start);
        } catch (...) {
          const std::lock_guard lock(failure_mutex);
          if (!failure) failure = std::current_exception();
          abort_.store(true, std::memory_order_relaxed);
        }
      });
    }
  }
  wall_seconds_ += now_seconds() - start;
  const ClockTicks run_end = clock_ticks();
  for (std::size_t core = 0; core < last_run_core_times_.size(); ++core) {
    StepTimes& times = last_run_core_times_[core];
    times[TimeCategory::fill_drain] += 1e-9 * double(run_end - core_last_firing_end_[core]);
    times.wall = 1e-9 * double(run_end - run_start);
  }
  initialised_ = true;
  if (failure) {
    broken_ = true;
    std::rethrow_exception(failure);
  }
}

// A core's stretch of firings without an idle sweep between them: work that never blocks, so
// what its CPU time lacks of its wall the OS ran something else. Read at its two ends only (a
// getrusage costs ~1.4 us, a firing tens); the end is read when the core has nothing to do.
struct Executor::WorkStretch {
  bool open = false;
  ClockTicks start = 0;
  ThreadCpu cpu;
  std::vector<double> firing_seconds;  // per actor of the core, in this stretch
};

void Executor::end_stretch(WorkStretch& stretch, std::span<const int> actors, StepTimes& times) {
  if (!stretch.open) return;
  const ThreadCpu cpu = thread_cpu();
  const double wall = 1e-9 * double(clock_ticks() - stretch.start);
  const double descheduled = wall - (cpu.seconds - stretch.cpu.seconds);
  times.descheduled += descheduled;
  times.involuntary_switches += double(cpu.involuntary_switches - stretch.cpu.involuntary_switches);
  for (std::size_t i = 0; i < actors.size(); ++i) {
    if (wall > 0) {
      actor_stats_[actors[i]].descheduled_seconds += descheduled * stretch.firing_seconds[i] / wall;
    }
    stretch.firing_seconds[i] = 0;
  }
  stretch.open = false;
}

// One core's loop: sweep the actors in stage order, firing each up to one steady-state share per
// sweep while its tokens and room allow; back off (pause, yield, then short sleeps) when idle.
void Executor::run_core(int core, std::int64_t iterations, bool with_init, ClockTicks run_start) {
  PinRecord& pin = pins_[core];
  if (options_.pin) {
    pin.core = core;
    pin.pu = pin_current_thread(core);
  }
  const std::vector<int>& actors = core_actors_[core];
  std::vector<std::int64_t> remaining(actors.size());
  // Firings of this core per iteration and in the init schedule: after init + k x steady
  // firings the core has done its share of k iterations (where idle time changes meaning).
  std::int64_t steady_firings = 0, init_firings = 0;
  for (std::size_t i = 0; i < actors.size(); ++i) {
    const int a = actors[i];
    remaining[i] = iterations * schedule_.steady[a] + (with_init ? schedule_.init[a] : 0);
    steady_firings += schedule_.steady[a];
    init_firings += with_init ? schedule_.init[a] : 0;
  }
  StepTimes& times = last_run_core_times_[static_cast<std::size_t>(core)];
  ClockTicks& last_firing_end = core_last_firing_end_[static_cast<std::size_t>(core)];
  last_firing_end = run_start;
  SpanRing* const spans = core_spans_.empty() ? nullptr : core_spans_[static_cast<std::size_t>(core)].get();
  std::int64_t firings_done = 0;
  bool idled = false;  // since the last firing
  // Per actor: whether its last check already counted a stall, so a stall is counted once per wait.
  std::vector<char> stalled(actors.size(), 0);
  CoreStats& stats = core_stats_[core];
  int idle = 0;
  double idle_since = 0, waited = 0;
  WorkStretch stretch;
  stretch.firing_seconds.assign(actors.size(), 0.0);
  for (;;) {
    bool pending = false;
    bool fired = false;
    for (std::size_t i = 0; i < actors.size(); ++i) {
      if (remaining[i] == 0) continue;
      pending = true;
      const int a = actors[i];
      Actor& actor = *graph_.actors[a];
      const std::int64_t burst = std::max<std::int64_t>(1, schedule_.steady[a]);
      for (std::int64_t k = 0; k < burst && remaining[i] > 0; ++k) {
        bool ready = true;
        for (std::size_t p = 0; ready && p < actor_inputs_[a].size(); ++p) {
          if (actor_inputs_[a][p]->has_tokens(static_cast<std::size_t>(actor.inputs()[p].window())))
            continue;
          ready = false;
          if (!stalled[i]) ++channel_stats_[actor_input_edges_[a][p]].empty_stalls;
        }
        for (std::size_t p = 0; ready && p < actor_outputs_[a].size(); ++p) {
          if (actor_outputs_[a][p]->has_room(static_cast<std::size_t>(actor.outputs()[p].rate)))
            continue;
          ready = false;
          if (!stalled[i]) ++channel_stats_[actor_output_edges_[a][p]].full_stalls;
        }
        if (!ready) {
          stalled[i] = 1;
          break;
        }
        stalled[i] = 0;
        if (!stretch.open) {
          stretch.cpu = thread_cpu();
          stretch.start = clock_ticks();
          stretch.open = true;
        }
        const ClockTicks t0 = clock_ticks();
        Firing firing(actor_inputs_[a], actor_outputs_[a]);
        actor.fire(firing);
        const ClockTicks t1 = clock_ticks();
        const double seconds = 1e-9 * double(t1 - t0);
        const TimeCategory gap = idle_category(firings_done, idled, init_firings, steady_firings);
        count_firing(times, actor, firing, seconds, gap, 1e-9 * double(t0 - last_firing_end));
        if (spans != nullptr) record_firing(*spans, a, firing, last_firing_end, t0, t1, gap);
        ++actor_fired_[a];
        last_firing_end = t1;
        ++firings_done;
        idled = false;
        for (std::size_t p = 0; p < actor_inputs_[a].size(); ++p)
          actor_inputs_[a][p]->pop(static_cast<std::size_t>(actor.inputs()[p].rate));
        for (std::size_t p = 0; p < actor_outputs_[a].size(); ++p)
          actor_outputs_[a][p]->push(static_cast<std::size_t>(actor.outputs()[p].rate));
        --remaining[i];
        stretch.firing_seconds[i] += seconds;
        ActorStats& actor_stats = actor_stats_[a];
        if (actor_stats.firings == 0 || seconds < actor_stats.fastest_firing_seconds)
          actor_stats.fastest_firing_seconds = seconds;
        ++actor_stats.firings;
        actor_stats.busy_seconds += seconds;
        actor_stats.carved_seconds += std::min(seconds, firing.carved_seconds());
        stats.busy_seconds += seconds;
        ++stats.firings;
        fired = true;
      }
    }
    if (!pending || abort_.load(std::memory_order_relaxed)) break;
    if (fired) {
      idle = 0;
      continue;
    }
    end_stretch(stretch, actors, times);
    ++stats.idle_spins;
    idled = true;
    if (++idle == 1) {
      idle_since = now_seconds();
      waited = 0;
    } else if (idle % 64 == 0) {
      waited = now_seconds() - idle_since;
    }
    cpu_relax();
    // A partner's firing lasts tens to hundreds of microseconds: spin through it (a sleep's
    // wake-up would cost as much again), then yield, and sleep only when it is far behind.
    if (waited < 500e-6) {
      continue;
    } else if (waited < 5e-3) {
      std::this_thread::yield();
    } else {
      // Waiting this long means a partner is far behind or descheduled (a shared machine):
      // give the core away instead of spinning on it.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  end_stretch(stretch, actors, times);
  pin.observed_cpu = current_cpu();
}

// A firing's spans: the wait before it (gaps under a microsecond left out), the firing, and the
// part it counted as another category (a parameter block's update).
void Executor::record_firing(SpanRing& spans, int actor, const Firing& firing,
                             ClockTicks gap_start, ClockTicks start, ClockTicks end,
                             TimeCategory gap) {
  const Actor& fired = *graph_.actors[static_cast<std::size_t>(actor)];
  Span span;
  span.step = step_of_firing(actor, actor_fired_[static_cast<std::size_t>(actor)]);
  if (start - gap_start >= 1000) {
    span.start = gap_start;
    span.end = start;
    span.category = gap;
    spans.push(span);
  }
  span.start = start;
  span.end = end;
  span.category = fired.time_category();
  span.layer = static_cast<std::int8_t>(fired.time_layer());
  span.label = actor;
  span.firing = actor_fired_[static_cast<std::size_t>(actor)];
  spans.push(span);
  if (firing.carved_end() - firing.carved_start() >= 1000) {
    span.start = firing.carved_start();
    span.end = firing.carved_end();
    span.category = firing.carved_category();
    span.layer = -1;
    span.label = static_cast<std::int32_t>(graph_.actors.size()) + actor;
    spans.push(span);
  }
}

// Firings of the init schedule belong to the first step; then every steady[a] firings are one.
std::int64_t Executor::step_of_firing(int actor, std::int64_t firing) const {
  const auto a = static_cast<std::size_t>(actor);
  const std::int64_t steady = std::max<std::int64_t>(1, schedule_.steady[a]);
  return first_step_ + std::max<std::int64_t>(0, firing - schedule_.init[a]) / steady;
}

// Room per core for the kept steps and the few more in flight when a run ends (a firing, its
// wait and its carved part per firing), the init schedule's firings on top: no growth needed.
void Executor::keep_spans(std::size_t steps, std::int64_t first_step) {
  core_spans_.clear();
  first_step_ = first_step;
  for (int core = 0; core < partition_.cores; ++core) {
    std::int64_t per_step = 0, init = 0;
    for (int a : core_actors_[static_cast<std::size_t>(core)]) {
      per_step += schedule_.steady[static_cast<std::size_t>(a)];
      init += schedule_.init[static_cast<std::size_t>(a)];
    }
    const std::int64_t spans = 3 * ((static_cast<std::int64_t>(steps) + 4) * per_step + init);
    core_spans_.push_back(std::make_unique<SpanRing>(1, static_cast<std::size_t>(spans)));
  }
}

// What the time before a core's next firing was: its first firing's wait is the fill; a wait
// after a finished share of an iteration or inside one is what the options say; time between
// firings without a wait is the executor's own (other).
TimeCategory Executor::idle_category(std::int64_t fired, bool idled, std::int64_t init_firings,
                                     std::int64_t steady_firings) const {
  if (fired == 0) return TimeCategory::fill_drain;
  if (!idled) return TimeCategory::other;
  const bool between = steady_firings > 0 && fired >= init_firings &&
                       (fired - init_firings) % steady_firings == 0;
  return between ? options_.idle_between_iterations : options_.idle_within_iteration;
}

void Executor::count_firing(StepTimes& times, const Actor& actor, const Firing& firing,
                            double seconds, TimeCategory gap_category, double gap_seconds) {
  times[gap_category] += gap_seconds;
  const double carved = std::min(seconds, firing.carved_seconds());
  const double part = std::min(seconds - carved, firing.part_seconds());
  const double own = seconds - carved - part;
  times[actor.time_category()] += own;
  if (carved > 0) times[firing.carved_category()] += carved;
  if (part > 0) {
    times[TimeCategory::compute] += part;
    times.part_seconds[static_cast<std::size_t>(firing.part())] += part;
  }
  const auto layer = static_cast<std::size_t>(actor.time_layer());
  if (actor.time_category() != TimeCategory::compute) return;
  if (actor.time_layer() >= 0 && layer < max_timed_layers) {
    times.layer_seconds[layer] += own;
  } else {
    // The graph's compute actors outside a layer are the splitjoins' splits and joins.
    times.part_seconds[static_cast<std::size_t>(ComputePart::splitjoin)] += own;
  }
}

void profile_work(Graph& graph, const Schedule& schedule, std::int64_t iterations) {
  Executor executor(graph, schedule, single_core_partition(graph, schedule),
                    ExecutorOptions{.pin = false, .worker_prefix = "profile/core"});
  executor.run(1);  // warm caches and first-touch the channels
  executor.reset_stats();
  executor.run(iterations);
  for (std::size_t a = 0; a < graph.actors.size(); ++a) {
    const ActorStats& stats = executor.actor_stats()[a];
    if (stats.firings > 0) graph.actors[a]->set_work_estimate(stats.fastest_firing_seconds);
  }
}

}  // namespace cnnbench::stream
