// The stream strategy: trains through the stream runtime. prepare() builds the net's graph,
// schedules it, profiles a few warm-up steps on a scratch copy of the state, partitions the
// actors onto the cores and starts from the given model; run_steps() runs one steady-state
// iteration (one optimizer step of M micro-batches) per step and drains before returning.
// on_step is called by the sink actor, on the worker thread that runs it, in step order.
#include <algorithm>
#include <numeric>
#include <optional>

#include "../factories.hpp"
#include "../strategy_options.hpp"
#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/stream.hpp"
#include "actors.hpp"
#include "cnnbench/time_breakdown.hpp"
#include "training_graph.hpp"

namespace cnnbench {

namespace {

// Default group size: strict drains the pipeline every step, so fewer, larger micro-batches
// lose less to the drain and to per-firing costs: 2 in the paper's graph, where a second
// micro-batch fills the pipeline, and 1 with copies of the net, which have no pipeline to fill
// (measured on 2 cores: 1.60-1.66x serial against 1.51-1.52x with 2). The stale modes overlap
// groups and keep 4.
int parse_microbatches(const StrategyOptions& options, const TrainConfig& config,
                       Consistency consistency, int cores) {
  if (!options.given(strategy_option::microbatches)) {
    if (consistency != Consistency::strict) return std::gcd(config.batch, 4);
    const LayerWidths copies = choose_widths(options.text(strategy_option::widths), config.model,
                                             cores, consistency, config.batch);
    return copies.sample_groups > 1 ? 1 : std::gcd(config.batch, 2);
  }
  const int m = *options.whole_number(strategy_option::microbatches);  // >= 1: the spec's range
  CNNBENCH_CHECK(config.batch % m == 0, "--microbatches " + std::to_string(m) +
                                            ": must be >= 1 and divide the batch size " +
                                            std::to_string(config.batch));
  return m;
}

class StreamStrategy final : public Strategy {
 public:
  std::string name() const override { return "stream"; }

  void prepare(const Model& model, const Dataset& train, const TrainConfig& config) override {
    const StrategyOptions options(config, "stream");
    CNNBENCH_CHECK(config.threads >= 1, "--cores must be at least 1");
    CNNBENCH_CHECK(train.count > 0, "stream: the training set is empty");
    set_blas_threads(1);
    cores_ = config.threads;
    run_.cores = cores_;
    run_.data = &train;
    run_.model = config.model;
    run_.batch = config.batch;
    run_.consistency = parse_consistency(options.text(strategy_option::consistency));
    run_.microbatches = parse_microbatches(options, config, run_.consistency, cores_);
    run_.micro_batch = config.batch / run_.microbatches;
    // strict keeps one group in flight; the others let a second group overlap the first.
    run_.window = run_.consistency == Consistency::strict ? run_.microbatches
                                                          : 2 * run_.microbatches;
    run_.sgd = config.sgd;
    run_.balance_dynamic = options.is(strategy_option::balance, "dynamic");
    if (const auto slowdown = options.part_factor(strategy_option::slowdown)) {
      run_.slow_copy = slowdown->part;
      run_.slow_factor = slowdown->factor;
    }
    widths_ = choose_widths(options.text(strategy_option::widths), config.model, cores_,
                            run_.consistency, run_.micro_batch);

    TrainingGraph built = build_training_graph(run_, flow_, widths_);
    blocks_ = std::move(built.blocks);
    source_ = std::move(built.source);
    stream::Graph graph = stream::flatten(built.root, built.links);
    stream::Schedule schedule = stream::make_schedule(graph);

    // Profiling warm-up: a few real steps through the graph on one thread measure each actor.
    for (auto& block : blocks_) block->load(model);
    profile(graph, schedule, train);
    for (auto& block : blocks_) block->load(model);

    stream::Partition partition = stream::partition_graph(graph, schedule, cores_);
    stream::ExecutorOptions executor_options{.pin = config.pin, .worker_prefix = "stream/core"};
    set_idle_categories(executor_options);
    std::vector<WorkerId> cores;
    std::vector<int> unit_of;
    for (int core = 0; core < partition.cores; ++core) {
      cores.push_back({"stage", core});
      unit_of.push_back(core);
    }
    breakdown_ = BreakdownBuilder(std::move(cores), "stage", std::move(unit_of));
    executor_ = std::make_unique<stream::Executor>(std::move(graph), std::move(schedule),
                                                   std::move(partition), executor_options);
    const std::string dot = options.text(strategy_option::graph);
    if (!dot.empty()) {
      stream::write_graph_dot(dot, executor_->graph(), executor_->partition(),
                              std::string(model_name(config.model)) + " stream graph");
    }
  }

  void run_steps(const StepRange& range, const StepCallback& on_step) override {
    CNNBENCH_CHECK(executor_ != nullptr, "stream: run_steps before prepare");
    const ClockTicks range_start = clock_ticks();
    run_.range = range;
    run_.on_step = &on_step;
    source_->restart_at(range.global_first * run_.microbatches);
    if (trace_steps_ > 0 && !ran_) {
      executor_->keep_spans(static_cast<std::size_t>(trace_steps_), range.global_first);
    }
    ran_ = true;
    executor_->run(range.count);
    run_.on_step = nullptr;
    const std::vector<StepTimes>& cores = executor_->last_run_core_times();
    breakdown_.add_steps(cores, range.count, cores.front().wall);  // every core's wall is the run's
    breakdown_.end_range(1e-9 * double(clock_ticks() - range_start));
  }

  TimeBreakdown time_breakdown() const override;
  // The executor numbers its iterations from the first step it runs.
  void keep_trace(std::int64_t steps) override { trace_steps_ = steps; }
  Trace trace() override;

  void sync_to(Model& model) override {
    for (const auto& block : blocks_) block->store(model);
    std::fill(model.grads.begin(), model.grads.end(), 0.0f);
  }

  nlohmann::json metrics() const override;

  std::vector<PinRecord> pin_map() const override {
    return executor_ ? executor_->pin_records() : std::vector<PinRecord>{};
  }

 private:
  // Whole copies of the net, a copy per core or more: a core that waits waits for a slower copy
  // (the copies' update joins them). A pipeline: in strict, a core that finished its share of a
  // step waits for the pipeline to drain and fill again; otherwise it starves for tokens.
  void set_idle_categories(stream::ExecutorOptions& options) const {
    if (widths_.sample_groups > 1 && widths_.sample_groups >= cores_) {
      options.idle_between_iterations = options.idle_within_iteration = TimeCategory::imbalance_wait;
    } else if (run_.consistency == Consistency::strict) {
      options.idle_between_iterations = TimeCategory::fill_drain;
    }
  }

  void profile(stream::Graph& graph, const stream::Schedule& schedule, const Dataset& train) {
    constexpr int warmup_steps = 4;  // one to warm caches, three measured
    profile_order_.resize(std::size_t(warmup_steps) * run_.batch);
    for (std::size_t i = 0; i < profile_order_.size(); ++i) {
      profile_order_[i] = static_cast<std::uint32_t>(i % train.count);
    }
    const StepCallback ignore;
    run_.range = {profile_order_.data(), 0, warmup_steps, 0};
    run_.on_step = &ignore;
    source_->restart_at(0);
    stream::profile_work(graph, schedule, warmup_steps - 1);
    run_.on_step = nullptr;
    for (const auto& actor : graph.actors) profiled_.push_back(actor->work_estimate());
  }

  int cores_ = 1;
  TrainingPlan run_;  // read-only while the graph runs
  FlowTable flow_;
  LayerWidths widths_;
  std::vector<std::shared_ptr<ParamBlock>> blocks_;
  std::shared_ptr<SourceActor> source_;
  std::unique_ptr<stream::Executor> executor_;
  std::vector<std::uint32_t> profile_order_;
  std::vector<double> profiled_;
  BreakdownBuilder breakdown_;
  std::int64_t trace_steps_ = 0;  // --trace-steps, 0: no trace
  bool ran_ = false;
};

// The straggler among copies of the net is the copy whose actors were busiest over the run
// (an injected --slowdown included), not counting their parameter blocks' calls: there a copy
// may wait for the update another copy runs. Without copies, the busiest core.
TimeBreakdown StreamStrategy::time_breakdown() const {
  TimeBreakdown out = breakdown_.result(timed_layer_names(run_.model));
  if (run_.balance_dynamic) out.balanced_shares = flow_.shares();
  if (!executor_ || widths_.sample_groups < 2) return out;
  const auto copies = static_cast<std::size_t>(widths_.sample_groups);
  std::vector<double> copy_busy(copies, 0.0), copy_descheduled(copies, 0.0);
  const stream::Graph& graph = executor_->graph();
  for (std::size_t a = 0; a < graph.actors.size(); ++a) {
    if (const auto* actor = dynamic_cast<const CopyActor*>(graph.actors[a].get())) {
      const stream::ActorStats& stats = executor_->actor_stats()[a];
      const auto copy = static_cast<std::size_t>(actor->copy());
      copy_busy[copy] += stats.busy_seconds - stats.carved_seconds;
      copy_descheduled[copy] += stats.descheduled_seconds;
    }
  }
  std::vector<double> scratch;
  out.straggler = {"copy", 0, 1.0};
  for (std::size_t c = 0; c < copy_busy.size(); ++c) {
    const double excess = excess_over_median_of_others(copy_busy, c, scratch);
    if (c == 0 || excess > out.straggler.mean_excess) {
      out.straggler = {"copy", static_cast<int>(c), excess};
    }
  }
  out.straggler.descheduled_share = descheduled_share_of_excess(
      copy_busy, copy_descheduled, static_cast<std::size_t>(out.straggler.id), scratch);
  return out;
}

// The executor's trace with each firing's copy of the net and micro-batch: an actor that fires
// k times per micro-batch of a step fires for micro-batch i in its firings i k .. i k + k - 1.
Trace StreamStrategy::trace() {
  if (!executor_ || trace_steps_ == 0) return {};
  Trace out = executor_->trace(trace_steps_);
  const stream::Graph& graph = executor_->graph();
  const stream::Schedule& schedule = executor_->schedule();
  const auto actors = static_cast<std::int32_t>(graph.actors.size());
  for (TraceTrack& track : out.tracks) {
    for (Span& span : track.spans) {
      if (span.label < 0 || span.firing < 0) continue;
      const auto a = static_cast<std::size_t>(span.label % actors);
      if (const auto* actor = dynamic_cast<const CopyActor*>(graph.actors[a].get())) {
        span.copy = static_cast<std::int16_t>(actor->copy());
      }
      const std::int64_t per_micro_batch = schedule.steady[a] / run_.microbatches;
      if (per_micro_batch < 1 || schedule.steady[a] % run_.microbatches != 0) continue;
      const std::int64_t in_step =
          std::max<std::int64_t>(0, span.firing - schedule.init[a]) % schedule.steady[a];
      span.micro_batch = static_cast<std::int16_t>(in_step / per_micro_batch);
    }
  }
  return out;
}

nlohmann::json StreamStrategy::metrics() const {
  nlohmann::json m = nlohmann::json::object();
  m[strategy_option::consistency.name] = consistency_name(run_.consistency);
  m[strategy_option::microbatches.name] = run_.microbatches;
  m["micro_batch_size"] = run_.micro_batch;
  m["window_microbatches"] = run_.window;
  m["cores"] = cores_;
  m[strategy_option::balance.name] = run_.balance_dynamic ? "dynamic" : "static";
  m["copy_shares"] = flow_.shares();  // samples per copy of each micro-batch, as the last group ran
  m["copy_samples"] = flow_.copy_samples();  // samples per copy over the whole run
  if (run_.slow_copy >= 0) {
    m[strategy_option::slowdown.name] = {{"copy", run_.slow_copy}, {"factor", run_.slow_factor}};
  }
  m[strategy_option::widths.name] = widths_;
  if (!executor_) return m;
  const stream::Graph& graph = executor_->graph();
  const stream::Partition& partition = executor_->partition();
  m["graph_size"] = {{"actors", graph.actors.size()}, {"edges", graph.edges.size()},
                {"param_blocks", blocks_.size()}};
  m["predicted_speedup"] = partition.predicted_speedup;
  m["estimated_step_seconds"] = partition.total_work;
  m["estimated_core_seconds"] = partition.core_work;
  m["cross_core_bytes_per_step"] = partition.cross_core_bytes;
  std::vector<double> busy;
  for (const auto& core : executor_->core_stats()) busy.push_back(core.busy_seconds);
  m["busy_seconds_per_core"] = busy;
  m["wall_seconds"] = executor_->wall_seconds();
  m["bubble_fraction"] = executor_->bubble_fraction();
  std::int64_t full = 0, empty = 0;
  nlohmann::json channels = nlohmann::json::array();
  for (std::size_t e = 0; e < graph.edges.size(); ++e) {
    const auto& stats = executor_->channel_stats()[e];
    full += stats.full_stalls;
    empty += stats.empty_stalls;
    channels.push_back({{"edge", graph.edge_name(graph.edges[e])},
                        {"cross_core", partition.core_of[graph.edges[e].from] !=
                                           partition.core_of[graph.edges[e].to]},
                        {"full_stalls", stats.full_stalls},
                        {"empty_stalls", stats.empty_stalls}});
  }
  m["channel_full_stalls"] = full;
  m["channel_empty_stalls"] = empty;
  m["channels"] = channels;
  std::vector<std::int64_t> staleness;
  for (const auto& block : blocks_) {
    const std::vector<std::int64_t> histogram = block->staleness();
    if (staleness.size() < histogram.size()) staleness.resize(histogram.size(), 0);
    for (std::size_t s = 0; s < histogram.size(); ++s) staleness[s] += histogram[s];
  }
  nlohmann::json histogram = nlohmann::json::object();
  for (std::size_t s = 0; s < staleness.size(); ++s) histogram[std::to_string(s)] = staleness[s];
  m["staleness_histogram"] = histogram;
  nlohmann::json actors = nlohmann::json::array();
  nlohmann::json core_map = nlohmann::json::object();
  for (std::size_t a = 0; a < graph.actors.size(); ++a) {
    const auto& actor = *graph.actors[a];
    const auto& stats = executor_->actor_stats()[a];
    actors.push_back({{"name", actor.name()},
                      {"kind", actor.kind()},
                      {"path", graph.paths[a]},
                      {"core", partition.core_of[a]},
                      {"stage", partition.stage_of[a]},
                      {"profiled_seconds_per_firing", a < profiled_.size() ? profiled_[a] : 0.0},
                      {"firings", stats.firings},
                      {"busy_seconds", stats.busy_seconds}});
    core_map[actor.name()] = partition.core_of[a];
  }
  m["actors"] = actors;
  m["actor_core_map"] = core_map;
  return m;
}

}  // namespace

std::unique_ptr<Strategy> make_stream_strategy() { return std::make_unique<StreamStrategy>(); }

}  // namespace cnnbench
