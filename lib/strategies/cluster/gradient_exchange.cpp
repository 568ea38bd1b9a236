// The cluster strategy's gradient sum: over the threads of a rank in thread order, then over the
// ranks through the RankGroup, blocking or bucket by bucket during backward.
#include "gradient_exchange.hpp"

#include <algorithm>

#include "cnnbench/balance.hpp"
#include "node_update.hpp"

namespace cnnbench {

namespace {

std::vector<GradientBucket> layers_of(const ModelSpec& spec) {
  std::vector<GradientBucket> layers;
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

// Whether bits first..last of `mask` are all set.
bool all_bits_set(std::uint64_t mask, int first, int last) {
  for (int bit = first; bit <= last; ++bit) {
    if (((mask >> bit) & 1) == 0) return false;
  }
  return true;
}

}  // namespace

std::vector<GradientBucket> gradient_buckets(const ModelSpec& spec, std::size_t min_bytes) {
  const std::vector<GradientBucket> layers = layers_of(spec);
  std::vector<GradientBucket> buckets;  // last layer's bucket first
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
    const bool extend = !buckets.empty() &&
                        (buckets.back().end - buckets.back().begin) * sizeof(float) < min_bytes;
    if (!extend) {
      buckets.push_back(*layer);
      continue;
    }
    GradientBucket& bucket = buckets.back();
    bucket.name = layer->name + "+" + bucket.name;
    bucket.first_tensor = layer->first_tensor;
    bucket.begin = layer->begin;
  }
  std::reverse(buckets.begin(), buckets.end());
  return buckets;
}

std::vector<ScheduledAllreduce> allreduce_schedule(ModelKind kind, bool overlap) {
  const ModelSpec& spec = model_spec(kind);
  const auto layer_of = [&spec](int tensor) {
    const std::string& name = spec.tensors[static_cast<std::size_t>(tensor)].name;
    return name.substr(0, name.find('.'));
  };
  if (!overlap) return {{4.0 * static_cast<double>(spec.param_count), layer_of(0)}};
  std::vector<ScheduledAllreduce> schedule;
  for (const GradientBucket& bucket : gradient_buckets(spec, gradient_bucket_bytes)) {
    schedule.push_back({4.0 * static_cast<double>(bucket.end - bucket.begin), layer_of(bucket.first_tensor)});
  }
  return schedule;
}

std::vector<double> allreduce_schedule_bytes(ModelKind kind, bool overlap) {
  std::vector<double> bytes;
  for (const ScheduledAllreduce& a : allreduce_schedule(kind, overlap)) bytes.push_back(a.bytes);
  return bytes;
}

GradientExchange::GradientExchange(RankGroup& group, const ModelSpec& spec,
                                   std::vector<float*> thread_gradients, std::size_t count,
                                   bool sharded)
    : group_(group),
      buckets_(gradient_buckets(spec, gradient_bucket_bytes)),
      thread_gradients_(std::move(thread_gradients)),
      count_(count),
      tensors_(static_cast<int>(spec.tensors.size())),
      progress_(thread_gradients_.size()),
      bucket_threads_done_(std::make_unique<std::atomic<int>[]>(buckets_.size())),
      bucket_summed_(std::make_unique<std::atomic<bool>[]>(buckets_.size())) {
  CNNBENCH_CHECK(!thread_gradients_.empty(), "cluster: a gradient exchange needs a thread");
  CNNBENCH_CHECK(buckets_.back().end == count_,
                 "cluster: the gradient's size does not match the model's");
  CNNBENCH_CHECK(tensors_ <= 64 && buckets_.size() <= 64,
                 "cluster: a model of more than 64 tensors does not fit the overlap's bit sets");
  if (thread_gradients_.size() > 1) node_sum_.assign(count, 0.0f);
  sharded_ = sharded;
  if (!sharded_) return;
  // Each segment's sum lies where the segment lies in the flat buffer: the update then reads the
  // gradient at the same offset as the weights and momentum it steps, as the replicated one does.
  // own_begin counts the owned floats end to end, which the threads' cut of the update divides.
  std::size_t owned = 0;
  for (const GradientBucket& bucket : buckets_) {
    const EvenShare segment = even_share(static_cast<int>(bucket.end - bucket.begin), group_.size(),
                                         group_.rank());
    const auto floats = static_cast<std::size_t>(segment.count);
    owned_.push_back({bucket.begin + static_cast<std::size_t>(segment.offset), owned, floats});
    owned += floats;
  }
  owned_floats_ = owned;
  own_gradient_.assign(count_, 0.0f);
}

void GradientExchange::start_bucket_sum(std::size_t b) {
  const GradientBucket& bucket = buckets_[b];
  float* data = node_gradient() + bucket.begin;
  if (sharded_) {
    group_.start_sum_of_own_segment(data, bucket.end - bucket.begin,
                                    own_gradient_.data() + owned_[b].begin);
  } else {
    group_.start_sum(data, bucket.end - bucket.begin);
  }
}

void GradientExchange::share_segments(float* data) {
  if (!sharded_ || group_.size() == 1) return;
  std::lock_guard lock(group_mutex_);
  const ClockTicks start = clock_ticks();
  for (const GradientBucket& bucket : buckets_) {
    group_.start_share_segments(data + bucket.begin, bucket.end - bucket.begin);
  }
  group_.wait_for_sums();
  record_call(0, label_of(Call::share_segments), count_ * sizeof(float), start);
}

float* GradientExchange::node_gradient() {
  return thread_gradients_.size() > 1 ? node_sum_.data() : thread_gradients_[0];
}

std::size_t GradientExchange::sum_threads(std::size_t begin, std::size_t end) {
  const std::size_t threads = thread_gradients_.size();
  if (threads == 1) return 0;  // thread 0's buffer is the node's
  float* sum = node_gradient();
  std::copy(thread_gradients_[0] + begin, thread_gradients_[0] + end, sum + begin);
  for (std::size_t t = 1; t < threads; ++t) {
    const float* part = thread_gradients_[t];
    for (std::size_t i = begin; i < end; ++i) sum[i] += part[i];
  }
  return (threads + 1) * (end - begin);
}

// The names the MPI group's calls have (the simulated group in the tests stands in for them).
std::vector<std::string> GradientExchange::trace_labels() const {
  std::vector<std::string> labels;
  const std::string bucket_call = sharded_ ? "MPI_Ialltoallv bucket " : "MPI_Iallreduce bucket ";
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    labels.push_back(bucket_call + std::to_string(b) + " (" + buckets_[b].name + ")");
  }
  labels.insert(labels.end(), {"MPI_Testall progress", "MPI_Iallreduce loss and times",
                               "MPI_Testall wait for sums",
                               sharded_ ? "MPI_Ialltoallv+wait gradient" : "MPI_Iallreduce+wait gradient",
                               "MPI_Iallreduce+wait loss and times",
                               "MPI_Iallgatherv+wait stepped segments"});
  return labels;
}

void GradientExchange::record_call(int thread, std::int32_t label, std::size_t bytes,
                                   ClockTicks start) {
  if (rings_.empty()) return;
  Span span;
  span.start = start;
  span.end = clock_ticks();
  span.step = step_;
  span.category = TimeCategory::communication_exposed;
  span.label = label;
  span.bytes = static_cast<std::int64_t>(bytes);
  span.peers = static_cast<std::int16_t>(group_.size());
  rings_[static_cast<std::size_t>(thread)]->push(span);
}

void GradientExchange::sum_over_ranks(std::vector<double>& exchange) {
  if (group_.size() == 1) return;
  ClockTicks start = clock_ticks();
  if (sharded_) {
    for (std::size_t b = buckets_.size(); b-- > 0;) start_bucket_sum(b);
    group_.wait_for_sums();
  } else {
    group_.sum(node_gradient(), count_);
  }
  record_call(0, label_of(Call::sum_gradient), count_ * sizeof(float), start);
  start = clock_ticks();
  group_.sum(exchange.data(), exchange.size());
  record_call(0, label_of(Call::sum_exchange), exchange.size() * sizeof(double), start);
}

void GradientExchange::begin_step() {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    bucket_threads_done_[b].store(0, std::memory_order_relaxed);
    bucket_summed_[b].store(false, std::memory_order_relaxed);
  }
  std::fill(progress_.begin(), progress_.end(), ThreadProgress{});
  next_bucket_to_start_ = static_cast<int>(buckets_.size()) - 1;
  buckets_started_ = 0;
  first_start_time_ = 0;
  calls_seconds_ = 0;
}

void GradientExchange::gradients_ready(int thread, int first_tensor, int last_tensor) {
  const double start = now_seconds();
  ThreadProgress& progress = progress_[static_cast<std::size_t>(thread)];
  for (int t = std::max(first_tensor, 0); t <= std::min(last_tensor, tensors_ - 1); ++t) {
    progress.announced |= std::uint64_t{1} << t;
  }
  const int threads = static_cast<int>(thread_gradients_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const GradientBucket& bucket = buckets_[b];
    const std::uint64_t bit = std::uint64_t{1} << b;
    if ((progress.counted & bit) ||
        !all_bits_set(progress.announced, bucket.first_tensor, bucket.last_tensor)) {
      continue;
    }
    progress.counted |= bit;
    // The last thread to finish a bucket sums it for the node; the first bucket is summed by all.
    const bool all_threads_sum = b == 0 && threads > 1;
    if (bucket_threads_done_[b].fetch_add(1, std::memory_order_acq_rel) + 1 == threads &&
        !all_threads_sum) {
      progress.reduced_floats += static_cast<double>(sum_threads(bucket.begin, bucket.end));
      bucket_summed_[b].store(true, std::memory_order_release);
    }
  }
  if (thread == 0 || group_.any_thread_may_call()) {
    std::unique_lock lock(group_mutex_, std::try_to_lock);
    if (lock.owns_lock()) start_ready_buckets(thread);
  }
  progress.callback_seconds += now_seconds() - start;
}

std::size_t GradientExchange::sum_first_bucket_slice(int slice, int slices) {
  const GradientBucket& bucket = buckets_.front();
  const FloatRange range =
      cache_line_slices(bucket.end - bucket.begin, slices)[static_cast<std::size_t>(slice)];
  return sum_threads(bucket.begin + range.begin, bucket.begin + range.end);
}

void GradientExchange::first_bucket_summed() {
  bucket_summed_[0].store(true, std::memory_order_release);
}

double GradientExchange::callback_seconds(int thread) const {
  return progress_[static_cast<std::size_t>(thread)].callback_seconds;
}

double GradientExchange::reduced_floats(int thread) const {
  return progress_[static_cast<std::size_t>(thread)].reduced_floats;
}

void GradientExchange::start_ready_buckets(int thread) {
  const double start = now_seconds();
  while (next_bucket_to_start_ >= 0 &&
         bucket_summed_[static_cast<std::size_t>(next_bucket_to_start_)].load(std::memory_order_acquire)) {
    const GradientBucket& bucket = buckets_[static_cast<std::size_t>(next_bucket_to_start_)];
    if (buckets_started_++ == 0) first_start_time_ = start;
    const ClockTicks call = clock_ticks();
    start_bucket_sum(static_cast<std::size_t>(next_bucket_to_start_));
    record_call(thread, next_bucket_to_start_, (bucket.end - bucket.begin) * sizeof(float), call);
    --next_bucket_to_start_;
  }
  if (buckets_started_ > 0) {
    const ClockTicks call = clock_ticks();
    group_.progress_sums();
    // Most tests of the requests return at once: only the ones that took a microsecond show.
    if (clock_ticks() - call >= 1000) record_call(thread, label_of(Call::progress), 0, call);
  }
  calls_seconds_ += now_seconds() - start;
}

OverlapTimes GradientExchange::finish_step(std::vector<double>& exchange) {
  std::lock_guard lock(group_mutex_);
  const double start = now_seconds();
  const double calls_before = calls_seconds_;
  start_ready_buckets(0);  // every bucket is summed over the threads by now: starts what is left
  CNNBENCH_CHECK(next_bucket_to_start_ < 0, "cluster: a layer's gradients were never announced");
  ClockTicks call = clock_ticks();
  group_.start_sum(exchange.data(), exchange.size());
  record_call(0, label_of(Call::start_exchange), exchange.size() * sizeof(double), call);
  call = clock_ticks();
  group_.wait_for_sums();
  record_call(0, label_of(Call::wait), 0, call);
  const double end = now_seconds();
  calls_seconds_ = calls_before;  // the wait is counted once, as exposed time
  return {end - start + calls_before, end - first_start_time_, calls_before};
}

}  // namespace cnnbench
