// The update half of a cluster step inside one rank: what each thread owns, and how the threads'
// gradient buffers become the next weights, reduce-scattered over the threads and stepped on a
// replica of the model per thread or slice by slice of one shared model (node_update.hpp), with
// the floats each thread moves counted for metrics.reduce_bytes_per_thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/step_timeline.hpp"
#include "cnnbench/worker_pool.hpp"
#include "gradient_exchange.hpp"
#include "node_update.hpp"

namespace cnnbench {

// What each thread of a rank owns: its activations, its share's gradients and its inputs.
// Cache-line aligned: the per-step fields are written by their thread while neighbours write theirs.
struct alignas(64) ThreadState {
  std::unique_ptr<Workspace> workspace;
  aligned_vector<float> grads;
  aligned_vector<float> x;
  std::vector<std::uint8_t> y;
  double loss_sum = 0;
  double compute_seconds = 0;  // this step, injected slowdown included, communication excluded
  double reduced_floats = 0;   // the run's floats moved by reduce and update work of slice t
  // NodeUpdate::replicas: threads after the first keep a replica of the model (worker 0's is
  // model_) and every replica takes the same step, so each thread's forward reads weights its own
  // core wrote. NodeUpdate::slices: empty, every thread reads model_.
  aligned_vector<float> params, momentum;
  StepTimeline timeline;  // this share's phases, step by step, since the ranks last met
  // NodeUpdate::factors: this thread's rows of f1 (whose gradient it computes and steps); where
  // f1 is the first layer (FC-3) also their output for the whole batch (batch, rows), the seconds
  // it took this step, and where this thread's share starts in the batch.
  FloatRange f1_rows;
  aligned_vector<float> f1_out;
  double rows_seconds = 0;
  int share_offset = 0;
  std::unique_ptr<SpanRing> spans;  // --trace only
};

class NodeStep {
 public:
  // After the threads' buffers exist (and, for replicas, their copies of the model): cuts the
  // reduce-scatter's slices and points (slice, thread) at each thread's gradient there.
  NodeStep(WorkerPool& pool, std::vector<ThreadState>& threads, Model& model,
           GradientExchange& exchange, const SgdConfig& sgd, NodeUpdate design, int ranks);

  bool replicated() const { return design_ == NodeUpdate::replicas; }
  // The weights and momentum thread `replica` steps: its own copy, or the shared model.
  float* params_of(int replica);
  float* momentum_of(int replica);

  void sum_threads_in_parallel();
  void sum_every_buffer_into_every_replica();
  void sum_first_bucket_in_parallel();
  void sum_and_step_slices_of_the_shared_model();
  // NodeUpdate::factors, one rank: thread t computes its rows of f1.weight's gradient from every
  // thread's factors (samples[s] samples of share s, in share order) and steps them, and sums
  // and steps its slices of the other tensors, on the one shared model.
  void sum_factors_and_step_slices(const std::vector<int>& samples);
  void step_own_segments();
  // The step on the node's gradient summed over the ranks: the whole model, or with a sharded
  // exchange only this rank's own segments, cut over the threads.
  void apply_update();
  // Sharded, after the ranks shared the stepped weights into the node's model: each replica
  // after the first copies them.
  void copy_weights_to_replicas();

 private:
  // Runs work() as a working region of thread state t's step, on whichever worker runs it: the
  // time until a worker took it is imbalance_wait (as for a share of the map), the work itself
  // `category`, and the timeline measures what of it the OS spent running something else
  // (StepTimeline::begin_work). Closed here, not at the dispatch's end: end_work extends the
  // phase closed last, which would otherwise be the wait before the work.
  template <class Work>
  void measured(int t, TimeCategory category, Work&& work) {
    StepTimeline& timeline = threads_[static_cast<std::size_t>(t)].timeline;
    timeline.close(TimeCategory::imbalance_wait);
    timeline.begin_work();
    work();
    timeline.close(category);
    timeline.end_work();
  }

  WorkerPool& pool_;
  std::vector<ThreadState>& threads_;
  Model& model_;
  GradientExchange& exchange_;
  SgdConfig sgd_;
  NodeUpdate design_;
  int ranks_;
  int threads_per_rank_;
  std::vector<FloatRange> slices_;   // the reduce-scatter's slice per thread
  std::vector<const float*> slice_parts_;  // (slice, thread) -> thread's gradient at the slice
  // NodeUpdate::factors: per thread its slices of the floats before f1.weight and of those after
  // it (its rows of f1 are ThreadState::f1_rows).
  std::vector<std::vector<FloatRange>> rest_slices_;
  std::size_t f1_weight_offset_ = 0, row_floats_ = 0;
};

}  // namespace cnnbench
