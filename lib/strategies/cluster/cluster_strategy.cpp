// The data-parallel cluster strategy: every MPI rank is a node holding the whole model; each
// global batch is cut into contiguous per-rank shares and, inside a rank, per-thread shares.
// Map = forward + backward of a share into that thread's flat gradient buffer; reduce = a sum in
// thread order inside the node, then MPI_Allreduce(SUM) across nodes; every rank, and inside it
// every thread's replica of the model, applies the same SGD update. Differs from serial only in
// where the batch's gradient sum is computed.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "../factories.hpp"
#include "../rank_group.hpp"
#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/topology.hpp"

namespace cnnbench {

namespace {

// Tensors of one layer (e.g. f3.weight + f3.bias): the unit whose allreduce starts as soon as
// backward has finished it. Tensors lie contiguously, so a layer is one float range.
struct LayerRange {
  std::string name;
  int first_tensor = 0, last_tensor = 0;
  std::size_t begin = 0, end = 0;  // floats in the flat buffer
};

std::vector<LayerRange> layers_of(const ModelSpec& spec) {
  std::vector<LayerRange> layers;
  std::size_t expected_offset = 0;
  for (int t = 0; t < static_cast<int>(spec.tensors.size()); ++t) {
    const ParamTensor& tensor = spec.tensors[static_cast<std::size_t>(t)];
    CNNBENCH_CHECK(tensor.offset == expected_offset,
                   "cluster: tensor " + tensor.name + " does not follow its predecessor in the flat buffer");
    expected_offset += tensor.count;
    const std::string layer = tensor.name.substr(0, tensor.name.find('.'));
    if (layers.empty() || layers.back().name != layer) {
      layers.push_back({layer, t, t, tensor.offset, tensor.offset});
    }
    layers.back().last_tensor = t;
    layers.back().end = tensor.offset + tensor.count;
  }
  return layers;
}

// Consecutive layers merged, from the last one back, into buckets of at least `min_bytes` (the
// first bucket takes whatever is left): each bucket is one allreduce, so a small layer does not
// pay a collective's latency of its own.
std::vector<LayerRange> buckets_of(const std::vector<LayerRange>& layers, std::size_t min_bytes) {
  std::vector<LayerRange> buckets;  // last layer's bucket first
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
    const bool extend = !buckets.empty() &&
                        (buckets.back().end - buckets.back().begin) * sizeof(float) < min_bytes;
    if (!extend) {
      buckets.push_back(*layer);
      continue;
    }
    LayerRange& bucket = buckets.back();
    bucket.name = layer->name + "+" + bucket.name;
    bucket.first_tensor = layer->first_tensor;
    bucket.begin = layer->begin;
  }
  std::reverse(buckets.begin(), buckets.end());
  return buckets;
}

// Allreduce buckets of at least this size: on one machine a collective costs ~10 us of
// latency, a 64 KB sum about as much again.
constexpr std::size_t bucket_bytes = 64 * 1024;

// What each thread of a rank owns: its activations, its share's gradients and its inputs.
// Cache-line aligned: the per-step fields are written by their thread while neighbours write theirs.
struct alignas(64) ThreadState {
  std::unique_ptr<Workspace> workspace;
  aligned_vector<float> grads;
  aligned_vector<float> x;
  std::vector<std::uint8_t> y;
  std::vector<char> announced;  // per tensor, this step
  std::vector<char> counted;    // per bucket: this thread has counted it as done, this step
  double loss_sum = 0;
  double compute_seconds = 0;   // this step, injected slowdown included, communication excluded
  double callback_seconds = 0;  // this step, time spent starting communication from backward
  // Threads after the first keep a replica of the model (worker 0's is model_) and every replica
  // takes the same step: each thread's forward then reads weights its own core wrote, where a
  // shared model had every update slice move to the other cores' caches (measured on 2 cores:
  // the update took 54 us of a 0.88 ms LeNet-5 step shared, 35 us replicated).
  aligned_vector<float> params, momentum;
};

// Per-rank counters over the whole run; gathered to every rank after each range.
struct RankCounters {
  double steps = 0, samples = 0, compute_s = 0, reduce_s = 0, allreduce_exposed_s = 0,
         allreduce_in_flight_s = 0, update_s = 0, step_s = 0, last_share = 0, throughput = 0;
  static constexpr int fields = 10;
  std::array<double, fields> as_array() const {
    return {steps, samples, compute_s, reduce_s, allreduce_exposed_s, allreduce_in_flight_s,
            update_s, step_s, last_share, throughput};
  }
  static RankCounters from(const double* v) {
    return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]};
  }
};

void sleep_seconds(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

class ClusterStrategy final : public Strategy {
 public:
  ClusterStrategy() {
    ensure_mpi_initialized();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
    int thread_level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&thread_level);
    any_thread_may_call_mpi_ = thread_level >= MPI_THREAD_SERIALIZED;
    group_ = make_mpi_rank_group();
  }

  ~ClusterStrategy() override {
    // Leaving because of an error (ours was reported already, or the driver's): the other ranks
    // may be waiting in a collective, so the exit must abort the job rather than finalise.
    if (std::uncaught_exceptions() > 0 && ranks_ > 1) abort_job_at_exit();
  }

  std::string name() const override { return "cluster"; }
  bool is_primary() const override { return rank_ == 0; }

  bool agree_to_stop(bool requested) override {
    int stop = requested ? 1 : 0;
    if (ranks_ > 1) {
      guarded([&] { MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD); });
    }
    return stop != 0;
  }

  void prepare(const Model& model, const Dataset& train, const TrainConfig& config) override {
    guarded([&] { prepare_rank(model, train, config); });
  }

  void run_steps(const StepRange& range, const StepCallback& on_step) override {
    guarded([&] {
      for (std::int64_t i = 0; i < range.count; ++i) {
        const double loss_sum = run_step(range.order + (range.first + i) * config_.batch);
        on_step(i, loss_sum / config_.batch);
      }
      gather_counters_and_pins();
    });
  }

  void sync_to(Model& model) override {
    model.params = model_->params;
    model.momentum = model_->momentum;
  }

  nlohmann::json metrics() const override { return metrics_; }
  std::vector<PinRecord> pin_map() const override { return all_pins_; }

 private:
  // A failing rank ends the job at once (mpirun then stops every rank) with a line naming it;
  // a one-rank run just passes the error on.
  template <class Body>
  void guarded(Body&& body) {
    run_or_end_job(*group_, body);
  }

  void prepare_rank(const Model& model, const Dataset& train, const TrainConfig& config) {
    options_ = parse_cluster_options(config);
    if (options_.slow_rank >= ranks_) {
      fail("--slowdown " + std::to_string(options_.slow_rank) + ":...: there is no rank " +
           std::to_string(options_.slow_rank) + " in a job of " + std::to_string(ranks_) + " ranks");
    }
    CNNBENCH_CHECK(config.batch > 0, "--batch must be positive");
    config_ = config;
    data_ = &train;
    model_ = std::make_unique<Model>(model);
    layers_ = buckets_of(layers_of(model.spec()), bucket_bytes);
    threads_per_rank_ = config.threads;
    // Communication only exists between ranks; one rank has nothing to overlap.
    overlapping_ = options_.overlap && ranks_ > 1;
    set_blas_threads(1);

    rank_shares_ = split_evenly(config.batch, ranks_);
    counters_ = RankCounters{};

    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_size(node, &ranks_per_node_);
    const std::vector<int> cores = core_plan(node);
    MPI_Comm_free(&node);

    const std::string prefix = "cluster/rank" + std::to_string(rank_) + "/thread";
    pool_.reset();
    pool_ = std::make_unique<WorkerPool>(threads_per_rank_, cores, prefix);
    threads_.clear();
    threads_.resize(static_cast<std::size_t>(threads_per_rank_));
    // A thread's share is at most ceil(batch / threads) (the whole batch may land on one rank
    // when balancing dynamically); balancing the threads of a rank lets one take up to twice
    // that. Each thread allocates its own buffers, on its own memory.
    const int even_share = (config.batch + threads_per_rank_ - 1) / threads_per_rank_;
    const int max_share = options_.dynamic_balance && threads_per_rank_ > 1
                              ? std::min(config.batch, 2 * even_share)
                              : even_share;
    max_thread_share_ = max_share;
    thread_shares_.clear();
    const std::size_t params = model_->params.size();
    pool_->run_on_each([&](int worker) {
      ThreadState& state = threads_[static_cast<std::size_t>(worker)];
      state.workspace = std::make_unique<Workspace>(model.kind, max_share);
      state.grads.assign(params, 0.0f);
      state.x.assign(static_cast<std::size_t>(max_share) * train.image_size(), 0.0f);
      state.y.assign(static_cast<std::size_t>(max_share), 0);
      state.announced.assign(model.spec().tensors.size(), 0);
      state.counted.assign(layers_.size(), 0);
      if (worker > 0) {
        state.params = model_->params;
        state.momentum = model_->momentum;
      }
    });
    // One rank with several threads sums into its replicas instead (reduce_and_update_replicas).
    node_grads_.assign(threads_per_rank_ > 1 && ranks_ > 1 ? params : 0, 0.0f);
    layer_threads_done_ = std::make_unique<std::atomic<int>[]>(layers_.size());
    layer_reduced_ = std::make_unique<std::atomic<bool>[]>(layers_.size());
    gather_counters_and_pins();
  }

  // Logical cores for this rank's threads. Ranks that see the same cores (mpirun --bind-to none)
  // take consecutive blocks of threads_per_rank cores by local rank; ranks that mpirun bound to
  // their own cores count from 0 inside what they see.
  std::vector<int> core_plan(MPI_Comm node) {
    if (!config_.pin) return {};
    const Topology& topology = machine_topology();
    const int mine[2] = {topology.cores, topology.core_pus.empty() ? -1 : topology.core_pus[0][0]};
    std::vector<int> all(static_cast<std::size_t>(2 * ranks_per_node_));
    MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, node);
    bool shared = true;
    for (int r = 0; r < ranks_per_node_; ++r) {
      shared = shared && all[2 * static_cast<std::size_t>(r)] == mine[0] &&
               all[2 * static_cast<std::size_t>(r) + 1] == mine[1];
    }
    const int first = shared ? local_rank_ * threads_per_rank_ : 0;
    const int wanted = shared ? ranks_per_node_ * threads_per_rank_ : threads_per_rank_;
    if (wanted > topology.cores && rank_ == 0 && !warned_oversubscribed_) {
      std::fprintf(stderr,
                   "cnnbench: warning: %d threads per rank x %d ranks on this node but %d cores "
                   "visible to a rank; threads share cores (launch with mpirun --bind-to none and "
                   "at most cores / --threads ranks per node)\n",
                   threads_per_rank_, shared ? ranks_per_node_ : 1, topology.cores);
      warned_oversubscribed_ = true;
    }
    std::vector<int> cores(static_cast<std::size_t>(threads_per_rank_));
    std::iota(cores.begin(), cores.end(), first);
    return cores;
  }

  float* params_of(int replica) {
    return replica == 0 ? model_->params.data()
                        : threads_[static_cast<std::size_t>(replica)].params.data();
  }
  float* momentum_of(int replica) {
    return replica == 0 ? model_->momentum.data()
                        : threads_[static_cast<std::size_t>(replica)].momentum.data();
  }

  float* node_gradient() {
    CNNBENCH_CHECK(threads_per_rank_ == 1 || ranks_ > 1,
                   "cluster: one rank's threads have no node gradient; their replicas sum");
    return threads_per_rank_ > 1 ? node_grads_.data() : threads_[0].grads.data();
  }

  // One optimizer step on the global batch starting at `batch_indices`; returns the summed loss
  // of the whole global batch (all ranks).
  double run_step(const std::uint32_t* batch_indices) {
    const double step_start = now_seconds();
    const int rank_offset = std::accumulate(rank_shares_.begin(), rank_shares_.begin() + rank_, 0);
    const int rank_share = rank_shares_[static_cast<std::size_t>(rank_)];
    const std::vector<int> thread_shares = thread_shares_of(rank_share);
    last_thread_shares_ = thread_shares;
    std::vector<int> thread_offsets(thread_shares.size(), rank_offset);
    for (std::size_t t = 1; t < thread_shares.size(); ++t) {
      thread_offsets[t] = thread_offsets[t - 1] + thread_shares[t - 1];
    }
    if (overlapping_) begin_overlapped_step();

    // Map: share s, forward + backward into gradient buffer s. Without overlap or balancing any
    // awake worker may take any share (the buffers, not the threads, fix the summation order),
    // so a worker that a loaded machine keeps off its core does not hold the step up.
    const auto map_share = [&](int share) {
      const auto s = static_cast<std::size_t>(share);
      compute_share(share, batch_indices + thread_offsets[s], thread_shares[s]);
    };
    if (overlapping_ || options_.dynamic_balance) {
      // Backward's callbacks funnel MPI through worker 0; balanced shares are sized for their
      // worker's core.
      pool_->run_on_each(map_share);
    } else {
      pool_->run_tasks_anywhere(threads_per_rank_, map_share);
    }
    const double map_end = now_seconds();
    if (options_.dynamic_balance) balance_threads(thread_shares);

    double rank_loss = 0, rank_compute = 0, callback_seconds = 0;
    for (const ThreadState& state : threads_) {  // thread order: deterministic
      rank_loss += state.loss_sum;
      rank_compute = std::max(rank_compute, state.compute_seconds);
      callback_seconds += state.callback_seconds;
    }
    // [0]: summed loss; [1 + r]: rank r's compute seconds (zero elsewhere, so the sum is exact).
    std::vector<double> exchange(static_cast<std::size_t>(ranks_) + 1, 0.0);
    exchange[0] = rank_loss;
    exchange[static_cast<std::size_t>(rank_) + 1] = rank_compute;

    // Reduce: in thread order inside the node, then across nodes.
    double reduce_end = map_end, exposed = 0, in_flight = 0;
    if (overlapping_) {
      finish_overlapped_step(exchange, exposed, in_flight);
      exposed += step_mpi_call_seconds_;
      reduce_end = now_seconds();
    } else if (ranks_ == 1 && threads_per_rank_ > 1) {
      // Nothing to exchange: each replica sums the threads' gradients and steps in one dispatch.
      reduce_and_update_replicas();
      counters_.steps += 1;
      counters_.samples += rank_share;
      counters_.compute_s += rank_compute;
      counters_.update_s += now_seconds() - map_end;
      counters_.step_s += now_seconds() - step_start;
      counters_.last_share = rank_share;
      return exchange[0];
    } else {
      if (threads_per_rank_ > 1) reduce_in_thread_order_parallel();
      reduce_end = now_seconds();
      if (ranks_ > 1) {
        MPI_Allreduce(MPI_IN_PLACE, node_gradient(), static_cast<int>(model_->params.size()),
                      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, exchange.data(), static_cast<int>(exchange.size()),
                      MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      }
      exposed = in_flight = now_seconds() - reduce_end;
    }

    const double update_start = now_seconds();
    apply_update();
    const double step_end = now_seconds();

    counters_.steps += 1;
    counters_.samples += rank_share;
    counters_.compute_s += rank_compute;
    counters_.reduce_s += overlapping_ ? callback_seconds - step_mpi_call_seconds_
                                       : reduce_end - map_end;
    counters_.allreduce_exposed_s += exposed;
    counters_.allreduce_in_flight_s += in_flight;
    counters_.update_s += step_end - update_start;
    counters_.step_s += step_end - step_start;
    counters_.last_share = rank_share;
    if (options_.dynamic_balance) rebalance(exchange);
    return exchange[0];
  }

  // With overlap, share == the worker running it (its callbacks may call MPI as worker 0).
  void compute_share(int share, const std::uint32_t* indices, int count) {
    const int worker = share;
    ThreadState& state = threads_[static_cast<std::size_t>(share)];
    const double start = now_seconds();
    state.callback_seconds = 0;
    state.loss_sum = 0;
    std::fill(state.grads.begin(), state.grads.end(), 0.0f);
    const float grad_scale = 1.0f / static_cast<float>(config_.batch);
    if (count > 0) {
      gather_batch(state.x.data(), state.y.data(), *data_, indices, count);
      if (overlapping_) {
        state.loss_sum = forward_backward(
            model_->kind, params_of(share), state.grads.data(), state.x.data(),
            state.y.data(), count, grad_scale, *state.workspace,
            [&](int first, int last) { gradients_ready(worker, first, last); });
      } else {
        state.loss_sum = forward_backward(model_->kind, params_of(share), state.grads.data(),
                                          state.x.data(), state.y.data(), count, grad_scale,
                                          *state.workspace);
      }
    }
    // Layers backward did not announce (or a thread without samples) are final now.
    if (overlapping_) gradients_ready(worker, 0, static_cast<int>(model_->spec().tensors.size()) - 1);
    double compute = now_seconds() - start - state.callback_seconds;
    if (rank_ == options_.slow_rank) {
      sleep_seconds((options_.slow_factor - 1.0) * compute);
      compute = now_seconds() - start - state.callback_seconds;
    }
    state.compute_seconds = compute;
  }

  // Sum of the thread buffers in thread order over [begin, end): ((g0 + g1) + g2) + ...
  void reduce_range(std::size_t begin, std::size_t end) {
    float* sum = node_grads_.data();
    std::copy(threads_[0].grads.begin() + static_cast<std::ptrdiff_t>(begin),
              threads_[0].grads.begin() + static_cast<std::ptrdiff_t>(end), sum + begin);
    for (std::size_t t = 1; t < threads_.size(); ++t) {
      const float* part = threads_[t].grads.data();
      for (std::size_t i = begin; i < end; ++i) sum[i] += part[i];
    }
  }

  void reduce_in_thread_order_parallel() {
    const std::size_t params = model_->params.size();
    const std::vector<int> slices = split_evenly(static_cast<int>(params), threads_per_rank_);
    pool_->run_tasks_anywhere(threads_per_rank_, [&](int slice) {
      const std::size_t begin = static_cast<std::size_t>(
          std::accumulate(slices.begin(), slices.begin() + slice, 0));
      reduce_range(begin, begin + static_cast<std::size_t>(slices[static_cast<std::size_t>(slice)]));
    });
  }

  // One rank: each replica sums the threads' gradients in thread order and steps on its own.
  // On its own thread, not on whichever is awake: a replica stepped on another core would have
  // to come back to its thread's cache before the next forward.
  void reduce_and_update_replicas() {
    std::vector<const float*> parts;
    for (const ThreadState& state : threads_) parts.push_back(state.grads.data());
    const std::size_t n = model_->params.size();
    pool_->run_on_each([&](int replica) {
      sum_sgd_step(params_of(replica), parts.data(), threads_per_rank_, momentum_of(replica), n,
                   config_.sgd);
    });
  }

  // Every replica steps on the node's (allreduced) gradient, each on its own thread.
  void apply_update() {
    const float* grads = node_gradient();
    const std::size_t n = model_->params.size();
    pool_->run_on_each([&](int replica) {
      sgd_step(params_of(replica), grads, momentum_of(replica), n, config_.sgd);
    });
  }

  // ---- overlap: a layer's allreduce starts once every thread has finished its gradients ----

  void begin_overlapped_step() {
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      layer_threads_done_[l].store(0, std::memory_order_relaxed);
      layer_reduced_[l].store(false, std::memory_order_relaxed);
    }
    for (ThreadState& state : threads_) {
      std::fill(state.announced.begin(), state.announced.end(), 0);
      std::fill(state.counted.begin(), state.counted.end(), 0);
    }
    next_layer_to_post_ = static_cast<int>(layers_.size()) - 1;
    requests_.clear();
    first_post_time_ = 0;
    step_mpi_call_seconds_ = 0;
  }

  void gradients_ready(int worker, int first_tensor, int last_tensor) {
    const double start = now_seconds();
    ThreadState& state = threads_[static_cast<std::size_t>(worker)];
    const int tensors = static_cast<int>(state.announced.size());
    for (int t = std::max(first_tensor, 0); t <= std::min(last_tensor, tensors - 1); ++t) {
      state.announced[static_cast<std::size_t>(t)] = 1;
    }
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const LayerRange& layer = layers_[l];
      if (state.counted[l] ||
          !std::all_of(state.announced.begin() + layer.first_tensor,
                       state.announced.begin() + layer.last_tensor + 1, [](char a) { return a != 0; })) {
        continue;
      }
      state.counted[l] = 1;
      // The last thread to finish a bucket sums it for the node.
      if (layer_threads_done_[l].fetch_add(1, std::memory_order_acq_rel) + 1 == threads_per_rank_) {
        if (threads_per_rank_ > 1) reduce_range(layer.begin, layer.end);
        layer_reduced_[l].store(true, std::memory_order_release);
      }
    }
    if (worker == 0 || any_thread_may_call_mpi_) {
      std::unique_lock lock(mpi_mutex_, std::try_to_lock);
      if (lock.owns_lock()) progress_communication();
    }
    state.callback_seconds += now_seconds() - start;
  }

  // Starts the allreduce of every summed layer in the fixed order last layer -> first (the same
  // order on every rank, as MPI requires), then lets MPI progress the ones in flight.
  // Caller holds mpi_mutex_.
  void progress_communication() {
    const double start = now_seconds();
    while (next_layer_to_post_ >= 0 &&
           layer_reduced_[static_cast<std::size_t>(next_layer_to_post_)].load(std::memory_order_acquire)) {
      const LayerRange& layer = layers_[static_cast<std::size_t>(next_layer_to_post_)];
      if (requests_.empty()) first_post_time_ = start;
      requests_.emplace_back();
      MPI_Iallreduce(MPI_IN_PLACE, node_gradient() + layer.begin, static_cast<int>(layer.end - layer.begin),
                     MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &requests_.back());
      --next_layer_to_post_;
    }
    if (!requests_.empty()) {
      int done = 0;
      MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
    }
    step_mpi_call_seconds_ += now_seconds() - start;
  }

  void finish_overlapped_step(std::vector<double>& exchange, double& exposed, double& in_flight) {
    std::lock_guard lock(mpi_mutex_);
    const double start = now_seconds();
    const double calls_before = step_mpi_call_seconds_;
    progress_communication();  // every layer is summed by now: posts whatever is left
    CNNBENCH_CHECK(next_layer_to_post_ < 0, "cluster: a layer's gradients were never announced");
    requests_.emplace_back();
    MPI_Iallreduce(MPI_IN_PLACE, exchange.data(), static_cast<int>(exchange.size()), MPI_DOUBLE,
                   MPI_SUM, MPI_COMM_WORLD, &requests_.back());
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    const double end = now_seconds();
    step_mpi_call_seconds_ = calls_before;  // the wait below is counted once, as exposed time
    exposed = end - start;
    in_flight = end - first_post_time_;
  }

  // ---- dynamic load balancing -------------------------------------------------------------

  // Compute times that differ by less than this are noise, not imbalance.
  static constexpr double balance_tolerance = 0.05;

  // A rank's share over its threads: even, or (dynamic balance) as the threads' measured times
  // moved it, since the cores of one machine need not be equally fast (a virtual machine's
  // cores share their hosts with other guests; core 0 takes the interrupts). When the rank's
  // share changed, the threads keep their proportions of it.
  std::vector<int> thread_shares_of(int rank_share) {
    if (!options_.dynamic_balance || threads_per_rank_ == 1) {
      return split_evenly(rank_share, threads_per_rank_);
    }
    const int minimum = rank_share >= threads_per_rank_ ? 1 : 0;
    if (thread_shares_.empty()) {
      thread_shares_ = split_evenly(rank_share, threads_per_rank_);
    } else if (std::accumulate(thread_shares_.begin(), thread_shares_.end(), 0) != rank_share) {
      const std::vector<double> weights(thread_shares_.begin(), thread_shares_.end());
      thread_shares_ = balance_shares(rank_share, weights, minimum, max_thread_share_);
    }
    return thread_shares_;
  }

  void balance_threads(const std::vector<int>& thread_shares) {
    std::vector<double> seconds;
    for (const ThreadState& state : threads_) seconds.push_back(state.compute_seconds);
    const int rank_share = std::accumulate(thread_shares.begin(), thread_shares.end(), 0);
    const int minimum = rank_share >= threads_per_rank_ ? 1 : 0;
    thread_shares_ = equalize_times(thread_shares, seconds, minimum, max_thread_share_,
                                    balance_tolerance);
  }

  // Every rank sees the same compute times (from the step's allreduce) and so computes the
  // same new shares.
  void rebalance(const std::vector<double>& exchange) {
    const std::vector<double> seconds(exchange.begin() + 1, exchange.end());
    const int minimum = config_.batch >= ranks_ ? 1 : 0;
    rank_shares_ = equalize_times(rank_shares_, seconds, minimum, config_.batch, balance_tolerance);
  }

  // ---- metrics and pin map, gathered at points every rank reaches ----------------------------

  void gather_counters_and_pins() {
    check_replicas_agree();
    counters_.throughput = counters_.compute_s > 0 ? counters_.samples / counters_.compute_s : 0;
    std::vector<double> table(static_cast<std::size_t>(ranks_ * RankCounters::fields), 0.0);
    const auto mine = counters_.as_array();
    std::copy(mine.begin(), mine.end(), table.begin() + rank_ * RankCounters::fields);
    if (ranks_ > 1) {
      MPI_Allreduce(MPI_IN_PLACE, table.data(), static_cast<int>(table.size()), MPI_DOUBLE,
                    MPI_SUM, MPI_COMM_WORLD);
    }
    std::vector<RankCounters> per_rank;
    for (int r = 0; r < ranks_; ++r) {
      per_rank.push_back(RankCounters::from(table.data() + r * RankCounters::fields));
    }
    // Every rank has the same number of threads.
    last_thread_shares_.resize(static_cast<std::size_t>(threads_per_rank_), 0);
    std::vector<int> thread_shares(static_cast<std::size_t>(ranks_ * threads_per_rank_));
    MPI_Allgather(last_thread_shares_.data(), threads_per_rank_, MPI_INT, thread_shares.data(),
                  threads_per_rank_, MPI_INT, MPI_COMM_WORLD);
    metrics_ = make_metrics(per_rank, thread_shares);
    pool_->refresh_observed_cpus();
    gather_pins();
  }

  // The replicas take the same steps in the same float order, so they must stay bit-identical.
  void check_replicas_agree() const {
    for (int replica = 1; replica < threads_per_rank_; ++replica) {
      const ThreadState& state = threads_[static_cast<std::size_t>(replica)];
      CNNBENCH_CHECK(state.params == model_->params && state.momentum == model_->momentum,
                     "cluster: rank " + std::to_string(rank_) + " thread " +
                         std::to_string(replica) + "'s replica of the model differs from thread 0's");
    }
  }

  nlohmann::json make_metrics(const std::vector<RankCounters>& per_rank,
                              const std::vector<int>& thread_shares) const {
    double exposed_sum = 0, exposed_max = 0, flight_sum = 0;
    nlohmann::json ranks_json = nlohmann::json::array();
    for (int r = 0; r < ranks_; ++r) {
      const RankCounters& c = per_rank[static_cast<std::size_t>(r)];
      exposed_sum += c.allreduce_exposed_s;
      exposed_max = std::max(exposed_max, c.allreduce_exposed_s);
      flight_sum += c.allreduce_in_flight_s;
      ranks_json.push_back({{"rank", r},
                            {"samples", c.samples},
                            {"last_share", c.last_share},
                            {"last_thread_shares",
                             std::vector<int>(thread_shares.begin() + r * threads_per_rank_,
                                              thread_shares.begin() + (r + 1) * threads_per_rank_)},
                            {"compute_s", c.compute_s},
                            {"images_per_s_compute", c.throughput},
                            {"intra_node_reduce_s", c.reduce_s},
                            {"allreduce_s", c.allreduce_exposed_s},
                            {"update_s", c.update_s},
                            {"step_s", c.step_s}});
    }
    const double steps = per_rank.empty() ? 0 : per_rank[0].steps;
    const double exposed_mean = exposed_sum / ranks_;
    const double flight_mean = flight_sum / ranks_;
    const double payload_per_step = ranks_ > 1 ? 4.0 * static_cast<double>(model_->params.size()) +
                                                     8.0 * (ranks_ + 1)
                                               : 0.0;
    const double bus_factor = ranks_ > 1 ? 2.0 * (ranks_ - 1) / ranks_ : 0.0;
    const double bus_bytes = payload_per_step * bus_factor * steps;
    // Bandwidth over the time transfers were in flight (with overlap, part of it is hidden).
    const double transfer_seconds = overlapping_ ? flight_mean : exposed_mean;
    nlohmann::json metrics = {
        {"ranks", ranks_},
        {"threads_per_rank", threads_per_rank_},
        {"ranks_per_node", ranks_per_node_},
        {"overlap", options_.overlap ? "on" : "off"},
        {"overlap_active", overlapping_},
        {"balance", options_.dynamic_balance ? "dynamic" : "static"},
        {"steps", steps},
        {"allreduce",
         {{"seconds_mean", exposed_mean},
          {"seconds_max", exposed_max},
          {"ms_per_step_mean", steps > 0 ? 1e3 * exposed_mean / steps : 0.0},
          {"ms_per_step_max", steps > 0 ? 1e3 * exposed_max / steps : 0.0},
          {"payload_bytes_per_step", payload_per_step},
          {"bytes_moved_per_rank", bus_bytes},
          {"bus_gbps", transfer_seconds > 0 ? bus_bytes / transfer_seconds / 1e9 : 0.0}}},
        {"per_rank", ranks_json}};
    if (overlapping_) {
      const double hidden = std::max(0.0, flight_mean - exposed_mean);
      metrics["overlap_detail"] = {
          {"in_flight_s_mean", flight_mean},
          {"exposed_s_mean", exposed_mean},
          {"hidden_s_mean", hidden},
          {"hidden_fraction", flight_mean > 0 ? hidden / flight_mean : 0.0},
          {"meaning", "in flight: first layer's allreduce start to last completion; exposed: time "
                      "the step waited on communication; hidden = in flight - exposed"}};
    }
    if (options_.slow_rank >= 0) {
      metrics["slowdown"] = {{"rank", options_.slow_rank}, {"factor", options_.slow_factor}};
    }
    return metrics;
  }

  // Every rank's pin records end up on rank 0 (the one that reports).
  void gather_pins() {
    const std::vector<PinRecord> own = pool_->pin_records();
    if (ranks_ == 1) {
      all_pins_ = own;
      return;
    }
    const std::string text = pin_map_json(own).dump();
    int length = static_cast<int>(text.size());
    std::vector<int> lengths(static_cast<std::size_t>(ranks_)), offsets(static_cast<std::size_t>(ranks_));
    MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::string gathered;
    if (rank_ == 0) {
      std::exclusive_scan(lengths.begin(), lengths.end(), offsets.begin(), 0);
      gathered.resize(static_cast<std::size_t>(offsets.back() + lengths.back()));
    }
    MPI_Gatherv(text.data(), length, MPI_CHAR, gathered.data(), lengths.data(), offsets.data(),
                MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank_ != 0) {
      all_pins_ = own;
      return;
    }
    all_pins_.clear();
    for (int r = 0; r < ranks_; ++r) {
      const auto i = static_cast<std::size_t>(r);
      const auto records = nlohmann::json::parse(gathered.substr(static_cast<std::size_t>(offsets[i]),
                                                                 static_cast<std::size_t>(lengths[i])));
      for (const auto& record : records) {
        const auto index = [&](const char* key) { return record[key].is_null() ? -1 : record[key].get<int>(); };
        all_pins_.push_back({record["worker"].get<std::string>(), index("core"), index("pu"),
                             index("observed_cpu")});
      }
    }
  }

  int rank_ = 0, ranks_ = 1, local_rank_ = 0, ranks_per_node_ = 1;
  std::unique_ptr<RankGroup> group_;  // MPI_COMM_WORLD's ranks: ends the job after an error
  bool any_thread_may_call_mpi_ = false;
  bool warned_oversubscribed_ = false;
  ClusterOptions options_;
  TrainConfig config_;
  const Dataset* data_ = nullptr;
  std::unique_ptr<Model> model_;
  std::vector<LayerRange> layers_;
  int threads_per_rank_ = 1;
  bool overlapping_ = false;

  std::unique_ptr<WorkerPool> pool_;
  std::vector<ThreadState> threads_;
  aligned_vector<float> node_grads_;  // the node's summed gradient: several ranks and threads
  std::vector<int> rank_shares_;      // of each global batch, by rank
  std::vector<int> thread_shares_;           // of this rank's share, by thread (dynamic balance)
  int max_thread_share_ = 0;                 // what a thread's buffers hold
  std::vector<int> last_thread_shares_;      // of this rank's share, by thread, last step

  // Overlap state of the current step.
  std::unique_ptr<std::atomic<int>[]> layer_threads_done_;
  std::unique_ptr<std::atomic<bool>[]> layer_reduced_;
  std::mutex mpi_mutex_;
  int next_layer_to_post_ = -1;              // guarded by mpi_mutex_
  std::vector<MPI_Request> requests_;        // guarded by mpi_mutex_
  double first_post_time_ = 0;               // guarded by mpi_mutex_
  double step_mpi_call_seconds_ = 0;         // guarded by mpi_mutex_

  RankCounters counters_;
  nlohmann::json metrics_ = nlohmann::json::object();
  std::vector<PinRecord> all_pins_;
};

}  // namespace

std::unique_ptr<Strategy> make_cluster_strategy() { return std::make_unique<ClusterStrategy>(); }

}  // namespace cnnbench
