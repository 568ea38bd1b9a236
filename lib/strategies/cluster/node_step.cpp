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
