// The data-parallel cluster strategy: every rank is a node holding the whole model; each global
// batch is cut into contiguous per-rank shares and, inside a rank, per-thread shares.
// Map = forward + backward of a share into that thread's flat gradient buffer; reduce = a sum in
// thread order inside the node, reduce-scattered over the threads, then a sum over the ranks
// (gradient_exchange.hpp); every rank applies the same SGD update (or, sharded, each its own
// segment of it, then the ranks share the weights), inside it on a replica per thread or slice by
// slice of one shared model (node_step.hpp). Differs from serial only in
// where the batch's gradient sum is computed. The ranks are a RankGroup: MPI's under mpirun,
// simulated ones in the tests.
#include "cluster_strategy.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <numeric>
#include <thread>

#include "../factories.hpp"
#include "cluster_metrics.hpp"
#include "cluster_shares.hpp"
#include "cluster_step_times.hpp"
#include "cnnbench/balance.hpp"
#include "cnnbench/cluster.hpp"
#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/topology.hpp"
#include "cnnbench/worker_pool.hpp"
#include "gradient_exchange.hpp"
#include "node_step.hpp"
#include "node_update.hpp"

namespace cnnbench {

namespace {

void sleep_seconds(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

class ClusterStrategy final : public Strategy {
 public:
  explicit ClusterStrategy(std::unique_ptr<RankGroup> group)
      : group_(std::move(group)), rank_(group_->rank()), ranks_(group_->size()),
        times_(*group_, threads_) {}

  ~ClusterStrategy() override {
    // Leaving because of an error (ours was reported already, or the driver's): the other ranks
    // may be waiting in a collective, so the exit must end the job rather than wait for them.
    if (std::uncaught_exceptions() > 0 && ranks_ > 1) group_->end_job_at_exit();
  }

  std::string name() const override { return "cluster"; }
  bool is_primary() const override { return rank_ == 0; }

  bool agree_to_stop(bool requested) override {
    bool stop = requested;
    guarded([&] { stop = group_->any_rank(requested); });
    return stop;
  }

  std::vector<std::string> gather_texts(const std::string& mine) override {
    std::vector<std::string> all;
    guarded([&] { all = group_->gather_to_all(mine); });
    return all;
  }

  void prepare(const Model& model, const Dataset& train, const TrainConfig& config) override {
    guarded([&] { prepare_rank(model, train, config); });
  }

  void run_steps(const StepRange& range, const StepCallback& on_step) override {
    const ClockTicks range_start = clock_ticks();
    // The calling thread's run-queue time outside the steps: the OS's share of other_s.
    double queued_outside_steps = -thread_run_queue_seconds();
    guarded([&] {
      times_.begin_range(range.global_first, range.count);
      queued_outside_steps += thread_run_queue_seconds();
      for (std::int64_t i = 0; i < range.count; ++i) {
        exchange_->set_trace_step(range.global_first + i);
        const double loss_sum = run_step(range.order + (range.first + i) * config_.batch);
        on_step(i, loss_sum / config_.batch);
      }
      queued_outside_steps -= thread_run_queue_seconds();
      gather_counters_and_pins();
      queued_outside_steps += thread_run_queue_seconds();
    });
    times_.end_range(1e-9 * double(clock_ticks() - range_start), queued_outside_steps);
  }

  // Collective when the update is sharded: each rank holds the momentum of its own segments only.
  void sync_to(Model& model) override {
    guarded([&] { exchange_->share_segments(model_->momentum.data()); });
    model.params = model_->params;
    model.momentum = model_->momentum;
  }

  nlohmann::json metrics() const override { return metrics_; }
  void keep_trace(std::int64_t steps) override { exchange_->trace_calls(times_.keep_trace(steps)); }
  Trace trace() override;
  TimeBreakdown time_breakdown() const override {
    TimeBreakdown out = times_.result(config_.model);
    out.balanced_shares = balanced_shares_;
    return out;
  }
  std::vector<PinRecord> pin_map() const override { return all_pins_; }

 private:
  // A failing rank ends the job at once (mpirun then stops every rank) with a line naming it;
  // a one-rank run just passes the error on.
  template <class Body>
  void guarded(Body&& body) {
    run_or_end_job(*group_, body);
  }

  void prepare_rank(const Model& model, const Dataset& train, const TrainConfig& config) {
    node_step_.reset();  // it holds references to the model, the pool and the exchange
    options_ = parse_cluster_options(config);
    group_->set_comm_timeout(options_.comm_timeout_s);
    if (options_.slow_rank >= ranks_) {
      fail("--slowdown " + std::to_string(options_.slow_rank) + ":...: there is no rank " +
           std::to_string(options_.slow_rank) + " in a job of " + std::to_string(ranks_) + " ranks");
    }
    CNNBENCH_CHECK(config.batch > 0, "--batch must be positive");
    if (config.shard_data) check_own_block(train, config);
    config_ = config;
    data_ = &train;
    model_ = std::make_unique<Model>(model);
    threads_per_rank_ = config.threads;
    node_update_ = options_.node_update.value_or(
        auto_node_update(model.kind, model.params.size(), ranks_, threads_per_rank_));
    if (node_update_ == NodeUpdate::factors && ranks_ > 1) {
      fail("--node-update factors: a job of " + std::to_string(ranks_) +
           " ranks; factors sums f1's weight gradient from the factors the threads of one rank "
           "share in memory, so it takes one rank (across ranks: replicas or slices)");
    }
    // One rank of several threads: backward leaves f1.weight's gradient to the update, and where
    // f1 is the first layer (FC-3) each thread computes its rows of it for the whole batch.
    const bool deferred = node_update_ == NodeUpdate::factors && threads_per_rank_ > 1;
    rows_forward_ = deferred && first_layer_dense(model.kind);
    // Communication only exists between ranks; one rank has nothing to overlap.
    overlapping_ = options_.overlap && ranks_ > 1;
    set_blas_threads(1);

    shares_ = std::make_unique<ClusterShares>(config.batch, ranks_, rank_, threads_per_rank_,
                                              options_.dynamic_balance);
    counters_ = RankCounters{};

    const std::string prefix = "cluster/rank" + std::to_string(rank_) + "/thread";
    exchange_.reset();
    pool_.reset();
    pool_ = std::make_unique<WorkerPool>(threads_per_rank_, core_plan(), prefix);
    threads_.clear();
    threads_.resize(static_cast<std::size_t>(threads_per_rank_));
    // Each thread allocates its own buffers, on its own memory.
    const int max_share = shares_->max_thread_share();
    const std::size_t params = model_->params.size();
    pool_->run_on_each([&](int worker) {
      ThreadState& state = threads_[static_cast<std::size_t>(worker)];
      state.workspace = std::make_unique<Workspace>(model.kind, max_share);
      state.workspace->set_timeline(&state.timeline);
      state.workspace->set_deferred_first_dense(deferred);
      state.grads.assign(params, 0.0f);
      state.x.assign(static_cast<std::size_t>(max_share) * train.image_size(), 0.0f);
      state.y.assign(static_cast<std::size_t>(max_share), 0);
      if (deferred) {
        const auto rows = static_cast<std::size_t>(first_dense_rows(model.kind));
        const auto t = static_cast<std::size_t>(worker), threads = static_cast<std::size_t>(threads_per_rank_);
        state.f1_rows = {rows * t / threads, rows * (t + 1) / threads};
      }
      if (rows_forward_) {
        state.f1_out.assign(static_cast<std::size_t>(config.batch) * state.f1_rows.size(), 0.0f);
      }
      if (worker > 0 && node_update_ == NodeUpdate::replicas) {
        state.params = model_->params;
        state.momentum = model_->momentum;
      }
    });
    std::vector<float*> gradients;
    for (ThreadState& state : threads_) gradients.push_back(state.grads.data());
    exchange_ = std::make_unique<GradientExchange>(
        *group_, model.spec(), gradients, params,
        ranks_ > 1 && options_.rank_update == RankUpdate::sharded);
    node_step_ = std::make_unique<NodeStep>(*pool_, threads_, *model_, *exchange_, config_.sgd,
                                            node_update_, ranks_);
    times_.reset(ranks_, threads_per_rank_);
    network_ = gather_network(*group_);
    gather_counters_and_pins();
  }

  // --shard-data: this rank holds block `rank` of the job's ranks, and its share of every batch
  // (the even split, which is the shards order's share) comes from that block, so rank shares
  // stay fixed; threads inside a rank may still be balanced.
  void check_own_block(const Dataset& train, const TrainConfig& config) {
    if (config.shards != ranks_) {
      fail("--shard-data: the data is cut into " + std::to_string(config.shards) +
           " blocks but the job has " + std::to_string(ranks_) + " ranks");
    }
    const DataBlock block = data_block(train.set_size(), ranks_, rank_);
    if (train.first != block.first || train.count != block.count) {
      fail("--shard-data: rank " + std::to_string(rank_) + " holds samples [" +
           std::to_string(train.first) + ", " + std::to_string(train.first + train.count) +
           ") but its block is [" + std::to_string(block.first) + ", " +
           std::to_string(block.first + block.count) + ")");
    }
    if (rank_ == 0 && ranks_ > 1 && options_.dynamic_balance && !warned_fixed_rank_shares_) {
      std::fprintf(stderr, "cnnbench: note: --shard-data keeps each rank's share of a batch to "
                           "its own block: --balance dynamic balances the threads inside each "
                           "rank, not the ranks\n");
      warned_fixed_rank_shares_ = true;
    }
  }

  // Logical cores for this rank's threads. Ranks that see the same cores (mpirun --bind-to none)
  // take consecutive blocks of threads_per_rank cores by local rank; ranks that mpirun bound to
  // their own cores count from 0 inside what they see.
  std::vector<int> core_plan() {
    if (!config_.pin) return {};
    const Topology& topology = machine_topology();
    const std::vector<int> mine = {topology.cores,
                                   topology.core_pus.empty() ? -1 : topology.core_pus[0][0]};
    const std::vector<int> all = group_->gather_on_node(mine);
    const int ranks_here = group_->node_size();
    bool shared = true;
    for (int r = 0; r < ranks_here; ++r) {
      shared = shared && all[2 * static_cast<std::size_t>(r)] == mine[0] &&
               all[2 * static_cast<std::size_t>(r) + 1] == mine[1];
    }
    const int first = shared ? group_->node_rank() * threads_per_rank_ : 0;
    const int wanted = shared ? ranks_here * threads_per_rank_ : threads_per_rank_;
    if (wanted > topology.cores && rank_ == 0 && !warned_oversubscribed_) {
      std::fprintf(stderr,
                   "cnnbench: warning: %d threads per rank x %d ranks on this node but %d cores "
                   "visible to a rank; threads share cores (launch with mpirun --bind-to none and "
                   "at most cores / --threads ranks per node)\n",
                   threads_per_rank_, shared ? ranks_here : 1, topology.cores);
      warned_oversubscribed_ = true;
    }
    std::vector<int> cores(static_cast<std::size_t>(threads_per_rank_));
    std::iota(cores.begin(), cores.end(), first);
    return cores;
  }

  bool replicated() const { return node_update_ == NodeUpdate::replicas; }
  float* params_of(int replica) { return node_step_->params_of(replica); }

  // One optimizer step on the global batch starting at `batch_indices`; returns the summed loss
  // of the whole global batch (all ranks).
  double run_step(const std::uint32_t* batch_indices) {
    const double step_start = now_seconds();
    const ClockTicks step_ticks = clock_ticks();
    for (ThreadState& state : threads_) state.timeline.begin_step(step_ticks);
    const StepShares shares = shares_->next_step();
    if (overlapping_) exchange_->begin_step();

    // Map: share s, forward + backward into gradient buffer s. Without overlap or balancing any
    // awake worker may take any share (the buffers, not the threads, fix the summation order),
    // so a worker that a loaded machine keeps off its core does not hold the step up.
    const auto map_share = [&](int share) {
      const auto s = static_cast<std::size_t>(share);
      compute_share(share, batch_indices + shares.thread_offsets[s], shares.thread_shares[s]);
    };
    if (rows_forward_) {
      // Every share's inputs, then every thread's rows of f1 for the whole batch, then the rest
      // of each share's step: three dispatches, each thread on its own share and rows.
      pool_->run_on_each([&](int share) {
        const auto s = static_cast<std::size_t>(share);
        threads_[s].share_offset = shares.thread_offsets[s] - shares.rank_offset;
        gather_share(share, batch_indices + shares.thread_offsets[s], shares.thread_shares[s]);
      });
      pool_->run_on_each([&](int thread) { forward_first_dense_rows(thread, shares); });
      pool_->run_on_each(map_share);
    } else if (overlapping_ || options_.dynamic_balance) {
      // Backward's callbacks call the group through worker 0 (unless any thread may); balanced
      // shares are sized for their worker's core.
      pool_->run_on_each(map_share);
    } else {
      pool_->run_tasks_anywhere(threads_per_rank_, map_share);
    }
    const double map_end = now_seconds();
    // The shares that finished first waited here for the last.
    times_.close_all(TimeCategory::imbalance_wait);
    if (options_.dynamic_balance) {
      std::vector<double> seconds;
      // What a share's size moves: with rows forward, not the thread's rows of f1, which it
      // computes for the whole batch whatever its share (a core slower there would otherwise be
      // handed fewer samples for a time that samples cannot shorten).
      for (const ThreadState& state : threads_) {
        seconds.push_back(state.compute_seconds - (rows_forward_ ? state.rows_seconds : 0.0));
      }
      shares_->balance_threads(seconds);
    }

    double rank_loss = 0, rank_compute = 0, callback_seconds = 0;
    for (int t = 0; t < threads_per_rank_; ++t) {  // thread order: deterministic
      const ThreadState& state = threads_[static_cast<std::size_t>(t)];
      rank_loss += state.loss_sum;
      rank_compute = std::max(rank_compute, state.compute_seconds);
      if (overlapping_) callback_seconds += exchange_->callback_seconds(t);
    }
    // [0]: summed loss; [1 + r]: rank r's compute seconds (zero elsewhere, so the sum is exact).
    std::vector<double> exchange(static_cast<std::size_t>(ranks_) + 1, 0.0);
    exchange[0] = rank_loss;
    exchange[static_cast<std::size_t>(rank_) + 1] = rank_compute;

    counters_.steps += 1;
    counters_.samples += shares.rank_share;
    counters_.compute_s += rank_compute;
    counters_.last_share = shares.rank_share;
    if (ranks_ == 1 && threads_per_rank_ > 1) {
      // Nothing to exchange: the threads reduce-scatter the gradients and step.
      if (replicated() && threads_per_rank_ <= every_replica_sums_max_threads) {
        node_step_->sum_every_buffer_into_every_replica();  // the sum is fused into the update
      } else if (replicated()) {
        node_step_->sum_threads_in_parallel();
        times_.close_all(TimeCategory::reduce);
        node_step_->apply_update();
      } else if (node_update_ == NodeUpdate::factors) {
        node_step_->sum_factors_and_step_slices(shares.thread_shares);
      } else {
        node_step_->sum_and_step_slices_of_the_shared_model();  // the sum is fused in
      }
      times_.close_all(TimeCategory::update);
      times_.end_step_all();
      counters_.update_s += now_seconds() - map_end;
      counters_.step_s += now_seconds() - step_start;
      return exchange[0];
    }

    // Reduce: in thread order inside the node, then across nodes.
    if (overlapping_) {
      if (threads_per_rank_ > 1) {
        node_step_->sum_first_bucket_in_parallel();
        times_.close_all(TimeCategory::reduce);
      }
      counters_.reduce_s += now_seconds() - map_end;
      times_.arrive_all();
      const OverlapTimes times = exchange_->finish_step(exchange);
      times_.close_all(TimeCategory::communication_exposed);
      for (int t = 0; t < threads_per_rank_; ++t) {
        threads_[static_cast<std::size_t>(t)].reduced_floats += exchange_->reduced_floats(t);
      }
      counters_.reduce_s += callback_seconds - times.calls_s;
      counters_.allreduce_exposed_s += times.exposed_s;
      counters_.allreduce_in_flight_s += times.in_flight_s;
    } else {
      if (threads_per_rank_ > 1) node_step_->sum_threads_in_parallel();
      const double reduce_end = now_seconds();
      times_.close_all(TimeCategory::reduce);
      times_.arrive_all();
      exchange_->sum_over_ranks(exchange);
      times_.close_all(TimeCategory::communication_exposed);
      const double exposed = now_seconds() - reduce_end;
      counters_.reduce_s += reduce_end - map_end;
      counters_.allreduce_exposed_s += exposed;
      counters_.allreduce_in_flight_s += exposed;
    }

    const double update_start = now_seconds();
    node_step_->apply_update();
    times_.close_all(TimeCategory::update);
    double shared_s = 0;
    if (exchange_->sharded()) {  // each rank stepped its own segments: the ranks share them
      const double share_start = now_seconds();
      exchange_->share_segments(model_->params.data());
      times_.close_all(TimeCategory::communication_exposed);
      shared_s = now_seconds() - share_start;
      node_step_->copy_weights_to_replicas();
      times_.close_all(TimeCategory::update);
    }
    times_.end_step_all();
    const double step_end = now_seconds();
    counters_.update_s += step_end - update_start - shared_s;
    counters_.allreduce_exposed_s += shared_s;
    counters_.allreduce_in_flight_s += shared_s;
    counters_.step_s += step_end - step_start;
    // Every rank's compute seconds, the same on every rank after the sum.
    if (options_.dynamic_balance && !config_.shard_data) {
      shares_->balance_ranks({exchange.begin() + 1, exchange.end()});
    }
    return exchange[0];
  }

  // Rows forward: share `share`'s inputs into its thread's buffer (data), before any thread
  // computes its rows of f1 from them.
  void gather_share(int share, const std::uint32_t* indices, int count) {
    ThreadState& state = threads_[static_cast<std::size_t>(share)];
    state.timeline.close(TimeCategory::imbalance_wait);
    state.timeline.begin_work();
    if (count > 0) gather_batch(state.x.data(), state.y.data(), *data_, indices, count);
    state.timeline.close(TimeCategory::data);
    state.timeline.end_work();
  }

  // Rows forward: thread `thread`'s rows of f1 for every share's samples, (batch, rows) in share
  // order, from the model every thread reads (its rows of f1.weight only this thread's).
  void forward_first_dense_rows(int thread, const StepShares& shares) {
    ThreadState& state = threads_[static_cast<std::size_t>(thread)];
    state.timeline.close(TimeCategory::imbalance_wait);
    state.timeline.begin_work();
    const double start = now_seconds();
    const FloatRange rows = state.f1_rows;
    for (std::size_t s = 0; s < threads_.size(); ++s) {
      const int count = shares.thread_shares[s];
      if (count == 0 || rows.size() == 0) continue;
      const auto first = static_cast<std::size_t>(threads_[s].share_offset);
      first_dense_forward_rows(model_->kind, model_->params.data(), threads_[s].x.data(), count,
                               static_cast<int>(rows.begin), static_cast<int>(rows.end),
                               state.f1_out.data() + first * rows.size(),
                               state.workspace->dense_backend());
    }
    state.timeline.close_layer(first_dense_timed_layer(model_->kind));
    state.rows_seconds = now_seconds() - start;
    state.timeline.end_work();
  }

  // Rows forward: share `share`'s f1 output assembled from every thread's rows of it.
  void assemble_first_dense(int share, int count, int offset) {
    ThreadState& state = threads_[static_cast<std::size_t>(share)];
    float* out = first_dense_output(*state.workspace);
    const std::size_t width = static_cast<std::size_t>(first_dense_rows(model_->kind));
    for (const ThreadState& owner : threads_) {
      const FloatRange rows = owner.f1_rows;
      for (int i = 0; i < count; ++i) {
        const float* from = owner.f1_out.data() + static_cast<std::size_t>(offset + i) * rows.size();
        std::copy_n(from, rows.size(), out + static_cast<std::size_t>(i) * width + rows.begin);
      }
    }
  }

  // With overlap, share == the worker running it (its callbacks may call the group as worker 0).
  void compute_share(int share, const std::uint32_t* indices, int count) {
    const int worker = share;
    ThreadState& state = threads_[static_cast<std::size_t>(share)];
    StepTimeline& timeline = state.timeline;
    // Until a worker took the share (a worker that a loaded machine kept off its core).
    timeline.close(TimeCategory::imbalance_wait);
    // Up to the injected sleep the share only computes: the calls backward makes into the
    // exchange with overlap never block (they try its lock and start nonblocking sums).
    timeline.begin_work();
    const double start = now_seconds();
    state.loss_sum = 0;
    // Backward writes the share's gradients over the last step's (GradientWrite::overwrite)
    // instead of a pass clearing the buffer first (48 us of FC-3's 400 us step on 2 cores). The
    // other threads read the buffer in the last update, so its lines still come back from their
    // cores, now inside backward. Only a share without samples clears its buffer.
    if (count == 0) std::fill(state.grads.begin(), state.grads.end(), 0.0f);
    timeline.close_part(ComputePart::clear_gradients);
    const float grad_scale = 1.0f / static_cast<float>(config_.batch);
    if (count > 0 && rows_forward_) {
      assemble_first_dense(share, count, state.share_offset);
      timeline.close_layer(first_dense_timed_layer(model_->kind));
      state.loss_sum = forward_backward_after_first_dense(
          model_->kind, model_->params.data(), state.grads.data(), state.x.data(), state.y.data(),
          count, grad_scale, *state.workspace, GradientWrite::overwrite);
    } else if (count > 0) {
      gather_batch(state.x.data(), state.y.data(), *data_, indices, count);
      timeline.close(TimeCategory::data);
      if (overlapping_) {
        // The callbacks' calls into the group hold backward up: communication, not compute.
        state.loss_sum = forward_backward(
            model_->kind, params_of(share), state.grads.data(), state.x.data(), state.y.data(),
            count, grad_scale, *state.workspace,
            [&](int first, int last) {
              exchange_->gradients_ready(worker, first, last);
              timeline.close(TimeCategory::communication_exposed);
            },
            GradientWrite::overwrite);
      } else {
        state.loss_sum = forward_backward(model_->kind, params_of(share), state.grads.data(),
                                          state.x.data(), state.y.data(), count, grad_scale,
                                          *state.workspace, GradientWrite::overwrite);
      }
    }
    // Layers backward did not announce (or a thread without samples) are final now.
    const int tensors = static_cast<int>(model_->spec().tensors.size());
    if (overlapping_) {
      exchange_->gradients_ready(worker, 0, tensors - 1);
      timeline.close(TimeCategory::communication_exposed);
    }
    const auto communication = [&] {
      return overlapping_ ? exchange_->callback_seconds(worker) : 0.0;
    };
    double compute = now_seconds() - start - communication();
    timeline.end_work();  // a sleep is no descheduling
    if (rank_ == options_.slow_rank) {
      sleep_seconds((options_.slow_factor - 1.0) * compute);
      compute = now_seconds() - start - communication();
      timeline.close_part(ComputePart::injected);  // as a core this much slower would compute
    }
    state.compute_seconds = compute + (rows_forward_ ? state.rows_seconds : 0.0);
  }

  // ---- metrics and pin map, gathered at points every rank reaches ----------------------------

  void gather_counters_and_pins() {
    check_replicas_agree();
    times_.gather_into_breakdown();
    counters_.throughput = counters_.compute_s > 0 ? counters_.samples / counters_.compute_s : 0;
    counters_.reduce_bytes = 0;
    for (const ThreadState& state : threads_) {
      counters_.reduce_bytes = std::max(counters_.reduce_bytes, sizeof(float) * state.reduced_floats);
    }
    ClusterShape shape;
    shape.ranks = ranks_;
    shape.threads_per_rank = threads_per_rank_;
    shape.ranks_per_node = group_->node_size();
    shape.overlap = options_.overlap;
    shape.overlap_active = overlapping_;
    shape.dynamic_balance = options_.dynamic_balance;
    shape.slow_rank = options_.slow_rank;
    shape.slow_factor = options_.slow_factor;
    shape.parameters = model_->params.size();
    shape.allreduce_bytes = allreduce_schedule_bytes(model_->kind, overlapping_);
    shape.node_update = node_update_;
    shape.rank_update = exchange_->sharded() ? RankUpdate::sharded : RankUpdate::replicated;
    const std::vector<RankReport> reports =
        gather_rank_reports(*group_, counters_, shares_->last_thread_shares());
    metrics_ = cluster_metrics(shape, reports, network_);
    balanced_shares_.clear();
    if (options_.dynamic_balance) {
      for (const RankReport& report : reports) {
        balanced_shares_.push_back(static_cast<int>(report.counters.last_share));
      }
      if (ranks_ == 1) balanced_shares_ = reports[0].last_thread_shares;
    }
    pool_->refresh_observed_cpus();
    all_pins_ = gather_pins(*group_, pool_->pin_records());
  }

  // The replicas take the same steps in the same float order, so they must stay bit-identical.
  void check_replicas_agree() const {
    if (!replicated()) return;
    for (int replica = 1; replica < threads_per_rank_; ++replica) {
      const ThreadState& state = threads_[static_cast<std::size_t>(replica)];
      // Sharded, only the node's model keeps the momentum (of the rank's own segments).
      const bool momentum_agrees = exchange_->sharded() || state.momentum == model_->momentum;
      CNNBENCH_CHECK(state.params == model_->params && momentum_agrees,
                     "cluster: rank " + std::to_string(rank_) + " thread " +
                         std::to_string(replica) + "'s replica of the model differs from thread 0's");
    }
  }

  std::unique_ptr<RankGroup> group_;  // the job's ranks: sums, agreement, ending the job
  int rank_ = 0, ranks_ = 1;
  bool warned_oversubscribed_ = false, warned_fixed_rank_shares_ = false;
  ClusterOptions options_;
  TrainConfig config_;
  const Dataset* data_ = nullptr;
  std::unique_ptr<Model> model_;
  int threads_per_rank_ = 1;
  bool overlapping_ = false;
  NodeUpdate node_update_ = NodeUpdate::replicas;
  bool rows_forward_ = false;  // factors, FC-3, one rank of several threads: f1 by rows

  std::unique_ptr<WorkerPool> pool_;
  std::vector<ThreadState> threads_;
  ClusterStepTimes times_;  // after group_ and threads_: it holds references to both
  std::unique_ptr<GradientExchange> exchange_;
  std::unique_ptr<NodeStep> node_step_;  // after exchange_: it holds a reference to it
  std::unique_ptr<ClusterShares> shares_;

  RankCounters counters_;
  ClusterNetwork network_;  // the ranks' hosts and link rate, gathered once
  std::vector<int> balanced_shares_;
  nlohmann::json metrics_ = nlohmann::json::object();
  std::vector<PinRecord> all_pins_;
};

// Collective. Each rank's own spans with the waits the breakdown calls imbalance relabelled,
// moved onto rank 0's clock, then every rank's tracks on rank 0.
Trace ClusterStrategy::trace() {
  if (!times_.tracing()) return {};
  constexpr int clock_rounds = 16;
  std::int64_t offset = 0;
  guarded([&] { offset = group_->clock_offset_to_rank0(clock_rounds); });
  const std::vector<TraceTrack> own = times_.own_tracks(offset);
  Trace out;
  guarded([&] { out.tracks = gather_trace_tracks(*group_, own); });
  for (TraceTrack& track : out.tracks) {
    track.name = "cluster/rank" + std::to_string(track.process) + "/thread" +
                 std::to_string(track.thread);
  }
  out.labels = exchange_->trace_labels();
  return out;
}

}  // namespace

std::unique_ptr<Strategy> make_cluster_strategy(std::unique_ptr<RankGroup> group) {
  return std::make_unique<ClusterStrategy>(std::move(group));
}

#if CNNBENCH_HAVE_MPI
// Under mpirun or not, the strategy runs on MPI_COMM_WORLD (a one-rank world without mpirun).
std::unique_ptr<Strategy> make_cluster_strategy() {
  return make_cluster_strategy(make_mpi_rank_group());
}
#endif

}  // namespace cnnbench
