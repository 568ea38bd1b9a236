// The GPU strategy's use of the CUDA runtime, checked on the host against fakes that model it:
// the start-up uploads (device_upload.hpp) against streams that run their work late, and the
// fallback to eager launches when a CUDA graph capture fails at any point (graph_runner.hpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../lib/strategies/gpu/device_upload.hpp"
#include "../lib/strategies/gpu/graph_runner.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench::gpu {
namespace {

// Device memory is host memory here; what makes the model is when work lands. Every operation
// is queued on its stream and runs only when that stream or the whole device is synchronised,
// the latest the CUDA runtime allows. Stream 0 is the legacy stream, on which the synchronous
// cudaMemcpy and cudaMemset run: they too may return before the device has the data (cudaMemset
// on device memory always can, a pageable cudaMemcpy once the bytes are staged), and the
// strategy's non-blocking streams are not ordered after it.
class DeferredStreams {
 public:
  static constexpr int legacy = 0;

  void copy_async(void* device, const void* host, std::size_t bytes, int stream) {
    // The runtime stages pageable bytes before it returns: the copy sees them as they are now.
    std::vector<unsigned char> staged(static_cast<const unsigned char*>(host),
                                      static_cast<const unsigned char*>(host) + bytes);
    queue_[stream].push_back([device, staged] { std::memcpy(device, staged.data(), staged.size()); });
    streams_used_.push_back(stream);
  }
  void zero_async(void* device, std::size_t bytes, int stream) {
    queue_[stream].push_back([device, bytes] { std::memset(device, 0, bytes); });
    streams_used_.push_back(stream);
  }
  void synchronize_stream(int stream) { drain(stream); }
  void synchronize_device() {
    for (auto& [stream, ops] : queue_) drain(stream);
  }
  // The synchronous calls of the legacy stream, as the strategy made them before.
  void copy_sync(void* device, const void* host, std::size_t bytes) {
    copy_async(device, host, bytes, legacy);
  }
  void zero_sync(void* device, std::size_t bytes) { zero_async(device, bytes, legacy); }

  std::size_t pending() const {
    std::size_t n = 0;
    for (const auto& [stream, ops] : queue_) n += ops.size();
    return n;
  }
  const std::vector<int>& streams_used() const { return streams_used_; }

 private:
  void drain(int stream) {
    auto& ops = queue_[stream];
    for (auto& op : ops) op();
    ops.clear();
  }
  std::map<int, std::vector<std::function<void()>>> queue_;
  std::vector<int> streams_used_;
};

constexpr int compute_stream = 1;
constexpr int copy_stream = 2;

struct StartState {
  std::vector<float> params, momentum, grads, ones;
  std::vector<std::uint8_t> images;
};

StartState host_state() {
  StartState s;
  for (int i = 0; i < 1000; ++i) {
    s.params.push_back(0.001f * static_cast<float>(i) - 0.3f);
    s.momentum.push_back(0.5f - 0.0005f * static_cast<float>(i));
  }
  s.grads.assign(1000, 0.0f);
  s.ones.assign(64, 1.0f);
  for (int i = 0; i < 64 * 784; ++i) s.images.push_back(static_cast<std::uint8_t>(i * 7));
  return s;
}

// Device buffers as the allocator leaves them: not zero, not the data.
StartState garbage_state() {
  StartState d;
  d.params.assign(1000, -77.0f);
  d.momentum.assign(1000, -77.0f);
  d.grads.assign(1000, -77.0f);
  d.ones.assign(64, -77.0f);
  d.images.assign(64 * 784, 0xAB);
  return d;
}

std::vector<Upload> uploads_of(StartState& device, const StartState& host) {
  return {{device.params.data(), host.params.data(), sizeof(float) * host.params.size()},
          {device.momentum.data(), host.momentum.data(), sizeof(float) * host.momentum.size()},
          {device.grads.data(), nullptr, sizeof(float) * host.grads.size()},
          {device.ones.data(), host.ones.data(), sizeof(float) * host.ones.size()},
          {device.images.data(), host.images.data(), host.images.size()}};
}

void expect_landed(const StartState& device, const StartState& host) {
  EXPECT_EQ(device.params, host.params) << "parameters";
  EXPECT_EQ(device.momentum, host.momentum) << "momentum";
  EXPECT_EQ(device.grads, host.grads) << "gradients (zeros)";
  EXPECT_EQ(device.ones, host.ones) << "the ones of the bias gradients";
  EXPECT_EQ(device.images, host.images) << "the data set";
}

// After upload_and_settle, work on any stream (compute_, or copy_ in stream mode) sees the data,
// even though nothing has synchronised that stream.
TEST(GpuUploads, SettledForEveryStreamWhenTheyReturn) {
  const StartState host = host_state();
  StartState device = garbage_state();
  DeferredStreams streams;
  const std::vector<Upload> uploads = uploads_of(device, host);
  upload_and_settle(streams, compute_stream, std::span<const Upload>(uploads));
  EXPECT_EQ(streams.pending(), 0u) << "work still queued when the uploads returned";
  expect_landed(device, host);
  for (const int stream : streams.streams_used()) {
    EXPECT_EQ(stream, compute_stream) << "an upload went to stream " << stream
                                      << " instead of the compute stream";
  }
}

// The model reproduces the race fixed above: synchronous calls on the legacy stream, then a
// synchronisation of the non-blocking compute stream alone (the old prepare_rank), leave the
// device without the data when the copy stream's first batch copy or the first step starts.
TEST(GpuUploads, TheModelShowsTheOldSequenceRaces) {
  const StartState host = host_state();
  StartState device = garbage_state();
  DeferredStreams streams;
  streams.copy_sync(device.params.data(), host.params.data(), sizeof(float) * host.params.size());
  streams.zero_sync(device.grads.data(), sizeof(float) * host.grads.size());
  streams.synchronize_stream(compute_stream);
  EXPECT_GT(streams.pending(), 0u);
  EXPECT_NE(device.params, host.params);
  EXPECT_NE(device.grads, host.grads);
  streams.synchronize_stream(copy_stream);
  EXPECT_NE(device.params, host.params) << "the copy stream is not ordered after the legacy one";
}

// The host buffers may change or go away once upload_and_settle returns.
TEST(GpuUploads, HostMemoryIsFreeAfterwards) {
  StartState host = host_state();
  const StartState expected = host;
  StartState device = garbage_state();
  DeferredStreams streams;
  const std::vector<Upload> uploads = uploads_of(device, host);
  upload_and_settle(streams, compute_stream, std::span<const Upload>(uploads));
  host.params.assign(host.params.size(), 123.0f);
  streams.synchronize_device();
  expect_landed(device, expected);
}

// --- graph capture -----------------------------------------------------------------------------

enum class FailAt { nothing, begin, enqueue, end, instantiate };

const char* name_of(FailAt at) {
  switch (at) {
    case FailAt::nothing: return "nothing";
    case FailAt::begin: return "begin";
    case FailAt::enqueue: return "enqueue";
    case FailAt::end: return "end";
    case FailAt::instantiate: return "instantiate";
  }
  return "?";
}

// A capture-only model of the runtime's graph calls: it counts graphs and executable graphs
// alive, whether the stream is capturing, and whether an error is left pending.
struct FakeGraphApi {
  struct Counters {
    int graphs_alive = 0, execs_alive = 0, launches = 0;
  };
  using Graph = int*;  // non-null while a graph exists
  class Exec {
   public:
    Exec() = default;
    explicit Exec(Counters* counters) : counters_(counters) { ++counters_->execs_alive; }
    Exec(Exec&& other) noexcept : counters_(std::exchange(other.counters_, nullptr)) {}
    Exec& operator=(Exec&& other) noexcept {
      std::swap(counters_, other.counters_);
      return *this;
    }
    ~Exec() {
      if (counters_) --counters_->execs_alive;
    }
    explicit operator bool() const { return counters_ != nullptr; }

   private:
    Counters* counters_ = nullptr;
  };

  FailAt fail_at = FailAt::nothing;
  bool capturing = false, error_pending = false;
  int captured_enqueues = 0;
  Counters counters;
  int graph_token = 0;

  std::string fail(const char* what) {
    error_pending = true;
    return what;
  }
  std::string begin_capture() {
    if (fail_at == FailAt::begin) return fail("cudaErrorStreamCaptureUnsupported");
    capturing = true;
    return "";
  }
  std::string end_capture(Graph& graph) {
    capturing = false;
    if (fail_at == FailAt::end || fail_at == FailAt::enqueue) {
      return fail("cudaErrorStreamCaptureInvalidated");
    }
    graph = &graph_token;
    ++counters.graphs_alive;
    return "";
  }
  std::string instantiate(Exec& exec, Graph graph) {
    EXPECT_NE(graph, nullptr);
    if (fail_at == FailAt::instantiate) return fail("cudaErrorInvalidValue");
    exec = Exec(&counters);
    return "";
  }
  void launch(const Exec& exec) {
    EXPECT_TRUE(static_cast<bool>(exec));
    EXPECT_FALSE(capturing);
    ++counters.launches;
  }
  void destroy_graph(Graph graph) {
    EXPECT_NE(graph, nullptr);
    --counters.graphs_alive;
  }
  void clear_error() { error_pending = false; }
};

// One part's enqueue: runs the work (eager) or is recorded into the graph (capturing).
struct Part {
  FakeGraphApi& api;
  int executed = 0;
  void operator()() {
    if (!api.capturing) {
      ++executed;
      return;
    }
    ++api.captured_enqueues;
    if (api.fail_at == FailAt::enqueue) throw Error("cublasSgemm failed: not supported in capture");
  }
};

TEST(GpuGraphs, CapturedOnceThenLaunched) {
  FakeGraphApi api;
  GraphRunner<FakeGraphApi> runner(2, true);
  Part part{api};
  for (int step = 0; step < 5; ++step) runner.run(api, 0, [&] { part(); });
  EXPECT_EQ(part.executed, 1) << "the first step runs eagerly, then is captured";
  EXPECT_EQ(api.captured_enqueues, 1);
  EXPECT_EQ(api.counters.launches, 4);
  EXPECT_TRUE(runner.in_use());
  EXPECT_TRUE(runner.note().empty());
  EXPECT_EQ(api.counters.graphs_alive, 0) << "the graph is destroyed once instantiated";
  runner.drop_all();
  EXPECT_EQ(api.counters.execs_alive, 0);
}

class GpuGraphFallback : public ::testing::TestWithParam<FailAt> {};

// Wherever the capture fails, the run goes on eagerly, every step's work runs exactly once, the
// reason names the failing call, and nothing is left capturing, allocated or pending.
TEST_P(GpuGraphFallback, RunsOnEagerly) {
  const FailAt at = GetParam();
  FakeGraphApi api;
  GraphRunner<FakeGraphApi> runner(2, true);
  Part first{api}, second{api};
  // Part 0 captures well; then the failure hits part 1's capture and graphs go off for both.
  runner.run(api, 0, [&] { first(); });
  EXPECT_EQ(api.counters.execs_alive, 1);
  api.fail_at = at;
  for (int step = 0; step < 4; ++step) {
    EXPECT_NO_THROW(runner.run(api, 1, [&] { second(); })) << "failure at " << name_of(at);
    EXPECT_NO_THROW(runner.run(api, 0, [&] { first(); }));
  }
  EXPECT_EQ(second.executed, 4) << "failure at " << name_of(at);
  EXPECT_EQ(first.executed, 1 + 4) << "part 0: its graph went with the others: eager again";
  EXPECT_EQ(api.counters.launches, 0);
  EXPECT_FALSE(runner.enabled());
  EXPECT_FALSE(runner.in_use());
  EXPECT_FALSE(api.capturing) << "the stream was left capturing";
  EXPECT_FALSE(api.error_pending) << "the capture's error was left pending";
  EXPECT_EQ(api.counters.graphs_alive, 0) << "a graph leaked";
  EXPECT_EQ(api.counters.execs_alive, 0) << "an executable graph was kept";
  const std::string expected = at == FailAt::begin         ? "cudaStreamBeginCapture"
                               : at == FailAt::enqueue     ? "enqueue during capture"
                               : at == FailAt::end         ? "cudaStreamEndCapture"
                                                           : "cudaGraphInstantiate";
  EXPECT_NE(runner.note().find(expected), std::string::npos) << runner.note();
}

INSTANTIATE_TEST_SUITE_P(EveryPoint, GpuGraphFallback,
                         ::testing::Values(FailAt::begin, FailAt::enqueue, FailAt::end,
                                           FailAt::instantiate),
                         [](const auto& param_info) { return std::string(name_of(param_info.param)); });

// Errors of the work itself are not capture problems: eagerly they propagate.
TEST(GpuGraphs, EagerErrorsPropagate) {
  FakeGraphApi api;
  GraphRunner<FakeGraphApi> runner(1, false);
  EXPECT_THROW(runner.run(api, 0, [] { throw Error("kernel launch failed"); }), Error);
}

}  // namespace
}  // namespace cnnbench::gpu
