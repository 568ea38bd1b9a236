// The step timeline's bookkeeping: category names, adding steps up, the span ring.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "cnnbench/step_timeline.hpp"

namespace cnnbench {

const char* time_category_key(TimeCategory category) {
  switch (category) {
    case TimeCategory::compute: return "compute_s";
    case TimeCategory::update: return "update_s";
    case TimeCategory::reduce: return "reduce_s";
    case TimeCategory::communication_exposed: return "communication_exposed_s";
    case TimeCategory::imbalance_wait: return "imbalance_wait_s";
    case TimeCategory::fill_drain: return "fill_drain_s";
    case TimeCategory::starvation: return "starvation_s";
    case TimeCategory::data: return "data_s";
    case TimeCategory::other: return "other_s";
  }
  return "other_s";
}

const char* compute_part_key(ComputePart part) {
  switch (part) {
    case ComputePart::splitjoin: return "splitjoin_s";
    case ComputePart::clear_gradients: return "clear_gradients_s";
    case ComputePart::injected: return "injected_s";
  }
  return "injected_s";
}

ThreadCpu thread_cpu() {
  timespec cpu{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return {double(cpu.tv_sec) + 1e-9 * double(cpu.tv_nsec), usage.ru_nivcsw};
}

double thread_run_queue_seconds() {
  std::FILE* file = std::fopen("/proc/thread-self/schedstat", "r");
  if (file == nullptr) return 0;
  unsigned long long on_cpu = 0, waiting = 0;
  const int read = std::fscanf(file, "%llu %llu", &on_cpu, &waiting);
  std::fclose(file);
  return read == 2 ? 1e-9 * double(waiting) : 0;
}

double StepTimes::busy() const {
  return wall - (*this)[TimeCategory::communication_exposed] -
         (*this)[TimeCategory::imbalance_wait] - (*this)[TimeCategory::fill_drain] -
         (*this)[TimeCategory::starvation];
}

StepTimes& StepTimes::operator+=(const StepTimes& other) {
  for (std::size_t c = 0; c < seconds.size(); ++c) seconds[c] += other.seconds[c];
  for (std::size_t l = 0; l < layer_seconds.size(); ++l) layer_seconds[l] += other.layer_seconds[l];
  for (std::size_t p = 0; p < part_seconds.size(); ++p) part_seconds[p] += other.part_seconds[p];
  wall += other.wall;
  descheduled += other.descheduled;
  involuntary_switches += other.involuntary_switches;
  arrival += other.arrival;
  return *this;
}

void SpanRing::end_step() {
  const std::size_t wanted = (steps_ + 1) * in_step_;
  in_step_ = 0;
  if (wanted <= spans_.size()) return;
  std::vector<Span> grown = this->spans();
  grown.resize(wanted);
  next_ = std::min(next_, spans_.size());
  spans_ = std::move(grown);
}

std::vector<Span> SpanRing::spans() const {
  const std::size_t n = std::min(next_, spans_.size());
  std::vector<Span> out;
  out.reserve(n);
  for (std::size_t i = next_ - n; i < next_; ++i) out.push_back(spans_[i % spans_.size()]);
  return out;
}

void StepTimeline::begin_step(ClockTicks now) {
  current_ = StepTimes{};
  step_start_ = cursor_ = now;
  step_ = next_step_++;
}

void StepTimeline::end_work() {
  // The CPU time first, the wall after it: the OS preempts a thread that used up its slice as
  // it returns from a system call, and such a wait is descheduling.
  const ThreadCpu cpu = thread_cpu();
  const ClockTicks now = clock_ticks();
  // Not clamped at 0: the two clocks are read a few hundred nanoseconds apart, which may put a
  // short region's CPU time a little over its wall, and clamping would bias the sum upwards.
  current_.descheduled += seconds(work_start_, now) - (cpu.seconds - work_cpu_.seconds);
  const std::int64_t switches = cpu.involuntary_switches - work_cpu_.involuntary_switches;
  current_.involuntary_switches += double(switches);
  // These reads belong to the phase that just ended (in `other` they made a loaded machine's
  // serial run read 45% unexplained).
  const double s = seconds(cursor_, now);
  current_.seconds[static_cast<std::size_t>(last_category_)] += s;
  if (last_layer_ >= 0) current_.layer_seconds[static_cast<std::size_t>(last_layer_)] += s;
  if (last_part_ >= 0) current_.part_seconds[static_cast<std::size_t>(last_part_)] += s;
  Span* last = spans_ != nullptr ? spans_->last() : nullptr;
  if (last != nullptr && last->end == cursor_) last->end = now;
  cursor_ = now;
}

void StepTimeline::end_step(ClockTicks now) {
  add(TimeCategory::other, -1, now);
  current_.wall = seconds(step_start_, now);
  steps_.push_back(current_);
  if (spans_ != nullptr) spans_->end_step();
}

}  // namespace cnnbench
