// The update half of a cluster step inside one rank (node_step.hpp).
#include "node_step.hpp"

#include <algorithm>
#include <cstddef>

namespace cnnbench {

NodeStep::NodeStep(WorkerPool& pool, std::vector<ThreadState>& threads, Model& model,
                   GradientExchange& exchange, const SgdConfig& sgd, NodeUpdate design, int ranks)
    : pool_(pool),
      threads_(threads),
      model_(model),
      exchange_(exchange),
      sgd_(sgd),
      design_(design),
      ranks_(ranks),
      threads_per_rank_(static_cast<int>(threads.size())),
      slices_(cache_line_slices(model.params.size(), threads_per_rank_)) {
  // (slice, thread): slice s of thread t's gradient, so a slice's sum reads them in thread order.
  for (const FloatRange& slice : slices_) {
    for (ThreadState& state : threads_) slice_parts_.push_back(state.grads.data() + slice.begin);
  }
  if (design_ != NodeUpdate::factors) return;
  const ParamTensor& f1 = model.spec().tensor("f1.weight");
  f1_weight_offset_ = f1.offset;
  row_floats_ = f1.count / static_cast<std::size_t>(first_dense_rows(model.kind));
  const std::vector<FloatRange> before = cache_line_slices(FloatRange{0, f1.offset}, threads_per_rank_);
  const std::vector<FloatRange> after =
      cache_line_slices(FloatRange{f1.offset + f1.count, model.params.size()}, threads_per_rank_);
  const auto parts = static_cast<std::size_t>(threads_per_rank_);
  for (std::size_t t = 0; t < parts; ++t) rest_slices_.push_back({before[t], after[t]});
}

float* NodeStep::params_of(int replica) {
  return replica == 0 || !replicated() ? model_.params.data()
                                       : threads_[static_cast<std::size_t>(replica)].params.data();
}

float* NodeStep::momentum_of(int replica) {
  return replica == 0 || !replicated()
             ? model_.momentum.data()
             : threads_[static_cast<std::size_t>(replica)].momentum.data();
}

// Reduce-scatter: slice t of the node's sum in thread order, its slices on whichever workers
// are awake; each slice reads 1/T of every thread's gradient, so n floats per thread.
void NodeStep::sum_threads_in_parallel() {
  pool_.run_tasks_anywhere(threads_per_rank_, [&](int slice) {
    const FloatRange& range = slices_[static_cast<std::size_t>(slice)];
    measured(slice, TimeCategory::reduce, [&] { exchange_.sum_threads(range.begin, range.end); });
  });
  const auto threads = static_cast<std::size_t>(threads_per_rank_);
  for (std::size_t t = 0; t < threads; ++t) {
    threads_[t].reduced_floats += static_cast<double>((threads + 1) * slices_[t].size());
  }
}

// Replicas of one rank with at most every_replica_sums_max_threads threads: each replica sums
// all T buffers in thread order and steps, in one dispatch, on its own thread. (T + 2) n floats
// per thread against the reduce-scatter's (T + 1) n / T + 3n: fewer for T <= 2, and one
// dispatch instead of two, which a loaded machine makes wait for a descheduled worker twice.
void NodeStep::sum_every_buffer_into_every_replica() {
  std::vector<const float*> parts;
  for (const ThreadState& state : threads_) parts.push_back(state.grads.data());
  const std::size_t n = model_.params.size();
  pool_.run_on_each([&](int replica) {
    measured(replica, TimeCategory::update, [&] {
      sum_sgd_step(params_of(replica), parts.data(), threads_per_rank_, momentum_of(replica), n,
                   sgd_);
    });
  });
  const double floats = static_cast<double>((parts.size() + 2) * n);
  for (ThreadState& state : threads_) state.reduced_floats += floats;
}

// Overlap: the bucket every thread finishes last, summed by all of them.
void NodeStep::sum_first_bucket_in_parallel() {
  std::vector<double> floats(static_cast<std::size_t>(threads_per_rank_), 0.0);
  pool_.run_tasks_anywhere(threads_per_rank_, [&](int slice) {
    measured(slice, TimeCategory::reduce, [&] {
      floats[static_cast<std::size_t>(slice)] =
          static_cast<double>(exchange_.sum_first_bucket_slice(slice, threads_per_rank_));
    });
  });
  exchange_.first_bucket_summed();
  for (std::size_t t = 0; t < floats.size(); ++t) threads_[t].reduced_floats += floats[t];
}

// NodeUpdate::slices, one rank: slice t of every thread's gradient summed in thread order and
// stepped in one pass (sum_sgd_step, in L1-sized chunks) on slice t of the one shared model. It
// only reads the other threads' buffers: backward writes over them next step, so no line of a
// buffer is written by another core than its own.
void NodeStep::sum_and_step_slices_of_the_shared_model() {
  const int threads = threads_per_rank_;
  pool_.run_tasks_anywhere(threads, [&](int slice) {
    const FloatRange& range = slices_[static_cast<std::size_t>(slice)];
    const float* const* parts = slice_parts_.data() + static_cast<std::size_t>(slice * threads);
    measured(slice, TimeCategory::update, [&] {
      sum_sgd_step(model_.params.data() + range.begin, parts, threads,
                   model_.momentum.data() + range.begin, range.size(), sgd_);
    });
  });
  for (std::size_t t = 0; t < slices_.size(); ++t) {
    threads_[t].reduced_floats += static_cast<double>((slices_.size() + 2) * slices_[t].size());
  }
}

// Rows of f1.weight a chunk at a time: its gradient computed over the whole batch into a scratch
// of the chunk (48 x 784 floats for FC-3, 150 KB) and stepped while that is still in L2. The
// thread's gradient buffer is never written there: 470 KB a step less for L2 to hold, against
// a working set (its rows' weights and momentum, the batch's inputs) that already overflows it.
constexpr std::size_t factor_rows_per_chunk = 48;

void NodeStep::sum_factors_and_step_slices(const std::vector<int>& samples) {
  const int threads = threads_per_rank_;
  std::vector<DenseFactors> factors;
  for (int t = 0; t < threads; ++t) {
    const ThreadState& state = threads_[static_cast<std::size_t>(t)];
    factors.push_back(first_dense_factors(model_.kind, *state.workspace, state.x.data(),
                                          samples[static_cast<std::size_t>(t)]));
  }
  std::size_t batch = 0;
  for (int count : samples) batch += static_cast<std::size_t>(count);
  // f1's weight gradient is the compute backward would have done: the breakdown counts it to f1.
  const int f1_layer = first_dense_timed_layer(model_.kind);
  pool_.run_on_each([&](int slice) {
    const auto s = static_cast<std::size_t>(slice);
    ThreadState& own = threads_[s];
    StepTimeline& timeline = own.timeline;
    timeline.close(TimeCategory::imbalance_wait);
    timeline.begin_work();
    {
      const FloatRange rows = own.f1_rows;
      thread_local aligned_vector<float> chunk;
      chunk.resize(factor_rows_per_chunk * row_floats_);
      for (std::size_t first = rows.begin; first < rows.end; first += factor_rows_per_chunk) {
        const std::size_t last = std::min(rows.end, first + factor_rows_per_chunk);
        first_dense_weight_gradient_rows(model_.kind, chunk.data(), factors.data(), threads,
                                         static_cast<int>(first), static_cast<int>(last),
                                         own.workspace->dense_backend());
        timeline.close_layer(f1_layer);
        const std::size_t at = f1_weight_offset_ + first * row_floats_;
        sgd_step(model_.params.data() + at, chunk.data(), model_.momentum.data() + at,
                 (last - first) * row_floats_, sgd_);
        timeline.close(TimeCategory::update);
      }
      std::vector<const float*> parts(static_cast<std::size_t>(threads));
      for (const FloatRange& range : rest_slices_[s]) {
        if (range.size() == 0) continue;
        for (std::size_t t = 0; t < parts.size(); ++t) parts[t] = threads_[t].grads.data() + range.begin;
        sum_sgd_step(model_.params.data() + range.begin, parts.data(), threads,
                     model_.momentum.data() + range.begin, range.size(), sgd_);
      }
      timeline.close(TimeCategory::update);
    }
    timeline.end_work();
    // The factors read (every sample's f1 input and the slice's columns of its output gradient),
    // the rows' gradient written and stepped, the other slices summed and stepped.
    const FloatRange rows = own.f1_rows;
    double floats = static_cast<double>(batch * (row_floats_ + rows.size())) +
                    4.0 * static_cast<double>(rows.size() * row_floats_);
    for (const FloatRange& range : rest_slices_[s]) {
      floats += static_cast<double>((static_cast<std::size_t>(threads) + 2) * range.size());
    }
    own.reduced_floats += floats;
  });
}

// The step on the node's (summed over the ranks) gradient. Replicas: every replica, each on its
// own thread (stepped on another core it would have to come back to its thread's cache before
// the next forward). Slices: slice t of the shared model on whichever worker is awake.
void NodeStep::apply_update() {
  if (exchange_.sharded()) {
    step_own_segments();
    return;
  }
  const float* grads = exchange_.node_gradient();
  const std::size_t n = model_.params.size();
  if (replicated()) {
    pool_.run_on_each([&](int replica) {
      measured(replica, TimeCategory::update,
               [&] { sgd_step(params_of(replica), grads, momentum_of(replica), n, sgd_); });
    });
    for (ThreadState& state : threads_) state.reduced_floats += 3.0 * static_cast<double>(n);
    return;
  }
  pool_.run_tasks_anywhere(threads_per_rank_, [&](int slice) {
    const FloatRange& range = slices_[static_cast<std::size_t>(slice)];
    measured(slice, TimeCategory::update, [&] {
      sgd_step(model_.params.data() + range.begin, grads + range.begin,
               model_.momentum.data() + range.begin, range.size(), sgd_);
    });
  });
  for (std::size_t t = 0; t < slices_.size(); ++t) {
    threads_[t].reduced_floats += 3.0 * static_cast<double>(slices_[t].size());
  }
}

// Sharded: this rank's segments of the buckets, counted end to end (OwnedPiece::own_begin) and
// cut into one cache-line slice of them per thread; each steps the node's model (thread 0's) on
// its slice, whichever worker is awake. Every replica then takes the shared weights
// (copy_weights_to_replicas); only the node's model keeps the momentum of the rank's segments.
void NodeStep::step_own_segments() {
  const float* own = exchange_.own_gradient();
  const std::vector<OwnedPiece>& pieces = exchange_.owned_pieces();
  const std::vector<FloatRange> cut = cache_line_slices(exchange_.own_floats(), threads_per_rank_);
  pool_.run_tasks_anywhere(threads_per_rank_, [&](int slice) {
    const FloatRange& range = cut[static_cast<std::size_t>(slice)];
    measured(slice, TimeCategory::update, [&] {
      for (const OwnedPiece& piece : pieces) {
        const std::size_t first = std::max(range.begin, piece.own_begin);
        const std::size_t last = std::min(range.end, piece.own_begin + piece.count);
        if (first >= last) continue;
        const std::size_t at = piece.begin + (first - piece.own_begin);
        sgd_step(model_.params.data() + at, own + at, model_.momentum.data() + at, last - first, sgd_);
      }
    });
  });
  for (std::size_t t = 0; t < cut.size(); ++t) {
    threads_[t].reduced_floats += 3.0 * static_cast<double>(cut[t].size());
  }
}

void NodeStep::copy_weights_to_replicas() {
  if (!replicated() || threads_per_rank_ == 1) return;
  const std::size_t n = model_.params.size();
  pool_.run_on_each([&](int replica) {
    if (replica == 0) return;
    measured(replica, TimeCategory::update, [&] {
      std::copy(model_.params.begin(), model_.params.end(), params_of(replica));
    });
  });
  for (std::size_t t = 1; t < threads_.size(); ++t) threads_[t].reduced_floats += 2.0 * static_cast<double>(n);
}

}  // namespace cnnbench
