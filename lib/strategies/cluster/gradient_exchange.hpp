// How a rank's gradients reach every rank in the cluster strategy: the threads' buffers are
// summed in thread order into the node's gradient, and that is summed over the ranks, either
// after backward (one blocking sum) or bucket by bucket while backward still runs (overlap).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../rank_group.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/step_timeline.hpp"

namespace cnnbench {

// Consecutive tensors of one or more layers (e.g. f3.weight + f3.bias): one sum over the ranks,
// started as soon as backward has finished them. Tensors lie contiguously, so a bucket is one
// range of floats of the flat gradient.
struct GradientBucket {
  std::string name;  // its layers, "f2+f3"
  int first_tensor = 0, last_tensor = 0;
  std::size_t begin = 0, end = 0;  // floats in the flat buffer
};

// The model's layers (a tensor "layer.what" belongs to "layer"), merged from the last one back
// into buckets of at least `min_bytes` (the first bucket takes whatever is left): every sum
// costs a collective's latency, so a small layer does not get one of its own.
std::vector<GradientBucket> gradient_buckets(const ModelSpec& spec, std::size_t min_bytes);

// Buckets of at least this size: on one machine a collective costs ~10 us of latency, a 64 KB
// sum about as much again.
constexpr std::size_t gradient_bucket_bytes = 64 * 1024;

// Where the time of an overlapped exchange went, for the report.
struct OverlapTimes {
  double exposed_s = 0;    // the step waited on communication (calls during backward included)
  double in_flight_s = 0;  // first bucket's start to the last sum's end
  double calls_s = 0;      // spent in the group's calls from backward's callbacks
};

// --rank-update sharded: a piece of the flat buffer this rank steps, floats [begin, begin +
// count), whose summed gradient lies at the same offset of the exchange's own_gradient(); own_begin
// is where the piece starts among the rank's owned floats laid end to end (what the threads' cut
// of the update divides). One per bucket: the rank's segment of it (even_share over the ranks).
struct OwnedPiece {
  std::size_t begin = 0, own_begin = 0, count = 0;
};

class GradientExchange {
 public:
  // thread_gradients: each thread's flat gradient (`count` floats), summed in thread order.
  // With several threads the node's sum gets its own buffer, else it is thread 0's.
  // sharded: the sum over the ranks leaves each rank only its own segment of each bucket
  // (own_gradient()), summed in rank order; share_segments() then spreads the stepped weights.
  GradientExchange(RankGroup& group, const ModelSpec& spec,
                   std::vector<float*> thread_gradients, std::size_t count, bool sharded = false);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  bool sharded() const { return sharded_; }
  // Sharded only: the pieces this rank steps, own_floats() floats in all, and their summed
  // gradients (after the sum over the ranks) at the weights' offsets of a flat-sized buffer.
  const std::vector<OwnedPiece>& owned_pieces() const { return owned_; }
  const float* own_gradient() const { return own_gradient_.data(); }
  std::size_t own_floats() const { return owned_floats_; }
  // Sharded, collective: every rank's own segments of `data` (the flat buffer: weights after the
  // update, momentum before a checkpoint) copied to every rank, bucket by bucket; blocking.
  void share_segments(float* data);
  // The threads' gradients summed (after sum_threads or the overlapped step); then, after the
  // ranks' sum, the batch's whole gradient.
  float* node_gradient();

  // node_gradient()[begin, end) = ((g0 + g1) + g2) + ... over the threads' buffers. Returns the
  // floats it moved: T reads and one write per element (none with one thread).
  std::size_t sum_threads(std::size_t begin, std::size_t end);

  // Without overlap, after the map and sum_threads: sums the node's gradient over the ranks,
  // then `exchange` (loss and times), each in one blocking call.
  void sum_over_ranks(std::vector<double>& exchange);

  // ---- overlap: a bucket's sum over the ranks starts once every thread has finished it ----

  void begin_step();
  // Thread `thread` has finished the gradients of tensors first..last (backward's callback).
  // The last thread to finish a bucket sums it over the threads (but the first bucket with
  // several threads: see sum_first_bucket_slice); buckets whose node sum is done
  // are started in the fixed order last -> first (the same on every rank, as collectives
  // require), and the sums in flight are given a chance to progress.
  void gradients_ready(int thread, int first_tensor, int last_tensor);
  // The first layers' bucket is finished last, by every thread at about the same moment (FC-3:
  // f1, 88% of the weights), so rather than the last thread summing it alone, every thread sums
  // slice `slice` of `slices` after the map; then first_bucket_summed() lets it start.
  // Returns the floats moved, as sum_threads.
  std::size_t sum_first_bucket_slice(int slice, int slices);
  void first_bucket_summed();
  // This step's seconds in gradients_ready on `thread`, and the floats its bucket sums moved.
  double callback_seconds(int thread) const;
  double reduced_floats(int thread) const;
  // After the map: starts what is left and `exchange`, waits for all of it.
  OverlapTimes finish_step(std::vector<double>& exchange);

  // --trace: a span per call into the group (Span::label indexes trace_labels(), bytes and
  // peers set), in the ring of the thread that made it, stamped with step `step`.
  void trace_calls(std::vector<SpanRing*> thread_rings) { rings_ = std::move(thread_rings); }
  void set_trace_step(std::int64_t step) { step_ = step; }
  std::vector<std::string> trace_labels() const;

 private:
  // Called with group_mutex_ held, by thread `thread`.
  void start_ready_buckets(int thread);
  // The labels after the buckets' (one per bucket, by index).
  enum class Call { progress, start_exchange, wait, sum_gradient, sum_exchange, share_segments };
  // Starts bucket b's sum over the ranks: the whole of it, or this rank's segment (sharded).
  void start_bucket_sum(std::size_t b);
  std::int32_t label_of(Call call) const {
    return static_cast<std::int32_t>(buckets_.size()) + static_cast<std::int32_t>(call);
  }
  void record_call(int thread, std::int32_t label, std::size_t bytes, ClockTicks start);

  // Per thread, this step; cache-line aligned, as each thread writes its own.
  struct alignas(64) ThreadProgress {
    std::uint64_t announced = 0;  // bit t: tensor t is final
    std::uint64_t counted = 0;    // bit b: this thread has counted bucket b as done
    double callback_seconds = 0;
    double reduced_floats = 0;
  };

  RankGroup& group_;
  std::vector<GradientBucket> buckets_;
  std::vector<float*> thread_gradients_;
  std::size_t count_ = 0;           // floats of a gradient
  aligned_vector<float> node_sum_;  // several threads only
  bool sharded_ = false;
  std::vector<OwnedPiece> owned_;         // sharded: this rank's segment of each bucket
  aligned_vector<float> own_gradient_;    // sharded: their sums over the ranks
  std::size_t owned_floats_ = 0;          // sharded: the pieces' floats
  int tensors_ = 0;

  std::vector<ThreadProgress> progress_;
  std::unique_ptr<std::atomic<int>[]> bucket_threads_done_;
  std::unique_ptr<std::atomic<bool>[]> bucket_summed_;
  std::mutex group_mutex_;  // one thread at a time in the group's calls
  int next_bucket_to_start_ = -1;  // guarded by group_mutex_
  int buckets_started_ = 0;        // guarded by group_mutex_
  double first_start_time_ = 0;    // guarded by group_mutex_
  double calls_seconds_ = 0;       // guarded by group_mutex_
  std::vector<SpanRing*> rings_;   // --trace only, per thread
  std::int64_t step_ = 0;
};

}  // namespace cnnbench
