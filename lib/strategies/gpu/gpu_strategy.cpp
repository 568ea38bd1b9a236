// The GPU strategy: serial's training step on one CUDA device. It differs from serial in one
// visible way: every step (gather, forward, backward, SGD) is enqueued on a device stream, as
// one CUDA graph launch when capture works, and the host only reads the losses back per range.
// Data: "resident" uploads the data set once; "stream" copies each batch from pinned memory on a
// second stream, double-buffered, so the copy of step i+1 runs under the compute of step i.
// Under mpirun every rank drives one device and computes its share of each global batch; the
// gradients meet in pinned host memory, are summed over the ranks, and go back for the update.
// Where the time goes: the device stamps its timer at each kernel group's end (device_timing.hpp),
// read back with the losses; the device stream is the breakdown's worker and a trace track
// (thread 1) beside the host thread's (thread 0).
#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "../cluster/cluster_metrics.hpp"
#include "../rank_group.hpp"
#include "../rank_share.hpp"
#include "../strategy_options.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/time_breakdown.hpp"
#include "cnnbench/topology.hpp"
#include "cuda_api.hpp"
#include "device_count.hpp"
#include "device_memory.hpp"
#include "device_timing.hpp"
#include "device_upload.hpp"
#include "graph_runner.hpp"
#include "module.hpp"
#include "rank_metrics.hpp"
#include "step_launch.hpp"
#include "step_layout.hpp"

namespace cnnbench::gpu {

namespace {

enum class DataMode { resident, stream };

// The trace's threads of a rank: the host thread that enqueues, and the device stream.
constexpr int host_track = 0, device_track = 1;

int device_count_or_fail() {
  const DeviceCount devices = count_devices();
  if (devices.count > 0) return devices.count;
  fail(devices.reason + " (strategy 'gpu' needs an NVIDIA GPU" +
       (devices.runtime_failed ? " and driver)" : ")"));
}

// --device K, or `fallback` (rank on this machine modulo the device count) when not given.
int parse_device(const StrategyOptions& options, int count, int fallback) {
  const int device = options.whole_number(strategy_option::device).value_or(fallback);
  if (device >= count) {
    fail("--device " + std::to_string(device) + ": expected a CUDA device index in [0, " +
         std::to_string(count) + ") on this machine");
  }
  return device;
}

// The parts of a step a graph can hold: the whole step on one rank; with several ranks the host
// sums the gradients between forward_backward (ending with the copy device -> host) and update
// (starting with the copy host -> device).
enum class StepPart { whole_step, forward_backward, update };
constexpr int step_parts = 3;

DataMode parse_data_mode(const StrategyOptions& options) {
  return options.is(strategy_option::gpu_data, "stream") ? DataMode::stream : DataMode::resident;
}

bool parse_graph(const StrategyOptions& options) {
  return options.is(strategy_option::gpu_graph, "on");
}

class GpuStrategy final : public Strategy {
 public:
  GpuStrategy() { device_count_or_fail(); }

  ~GpuStrategy() override {
    // The members free device memory and handles of device_, which must be this thread's device.
    if (compute_) (void)cudaSetDevice(device_);
    // Work still queued must finish before the memory it uses goes away.
    if (compute_) (void)cudaStreamSynchronize(compute_.get());
    if (copy_) (void)cudaStreamSynchronize(copy_.get());
    // Leaving because of an error: other ranks may wait in a collective, so end the whole job.
    if (ranks_ && std::uncaught_exceptions() > 0) ranks_->end_job_at_exit();
  }

  std::string name() const override { return "gpu"; }
  bool is_primary() const override { return !ranks_ || ranks_->rank() == 0; }

  bool agree_to_stop(bool requested) override {
    if (!ranks_) return requested;
    bool stop = requested;
    guarded([&] { stop = ranks_->any_rank(requested); });
    return stop;
  }

  void prepare(const Model& model, const Dataset& train, const TrainConfig& config) override {
    ranks_ = join_rank_group();
    multi_rank_ = ranks_->size() > 1;
    guarded([&] { prepare_rank(model, train, config); });
  }

  void run_steps(const StepRange& range, const StepCallback& on_step) override {
    guarded([&] { run_range(range, on_step); });
  }

  void sync_to(Model& model) override {
    CNNBENCH_CUDA(cudaSetDevice(device_));
    CNNBENCH_CUDA(cudaStreamSynchronize(compute_.get()));
    CNNBENCH_CUDA(cudaMemcpy(model.params.data(), params_.data(), sizeof(float) * params_.size(),
                             cudaMemcpyDeviceToHost));
    CNNBENCH_CUDA(cudaMemcpy(model.momentum.data(), momentum_.data(),
                             sizeof(float) * momentum_.size(), cudaMemcpyDeviceToHost));
  }

  void keep_trace(std::int64_t steps) override {
    trace_steps_ = steps;
    host_spans_ = std::make_unique<SpanRing>(static_cast<std::size_t>(steps), spans_per_step_guess);
    device_spans_ = std::make_unique<SpanRing>(static_cast<std::size_t>(steps), spans_per_step_guess);
    device_timeline_.record_spans(device_spans_.get());
  }

  // Collective on a multi-rank job (every rank's tracks on rank 0). The ranks of one machine
  // share its steady clock; GPU ranks on several machines are not aligned.
  Trace trace() override {
    if (trace_steps_ == 0) return {};
    std::vector<TraceTrack> own;
    const int rank = ranks_->rank();
    own.push_back({rank, host_track, host_spans_->spans(), "", host_spans_->first_whole_step()});
    own.push_back({rank, device_track, device_spans_->spans(), "", device_spans_->first_whole_step()});
    keep_last_whole_steps(own, trace_steps_);
    Trace out;
    guarded([&] { out.tracks = gather_trace_tracks(*ranks_, own); });
    for (TraceTrack& track : out.tracks) {
      track.name = "gpu/rank" + std::to_string(track.process) +
                   (track.thread == device_track ? "/device" : "/host");
    }
    return out;
  }

  TimeBreakdown time_breakdown() const override {
    return breakdown_.result(timed_layer_names(model_kind_));
  }

  nlohmann::json metrics() const override {
    nlohmann::json m = {{strategy_option::device.name, device_},
                        {"device_name", device_name_},
                        {"gpu_data", mode_ == DataMode::resident ? "resident" : "stream"},
                        {"cuda_graph", graphs_.in_use()},
                        {"dataset_upload_seconds", dataset_upload_seconds_},
                        {"copy_seconds", copy_seconds_},
                        {"copy_bytes", copy_bytes_},
                        {"compute_seconds", compute_seconds_},
                        {"copy_hidden_fraction",
                         copy_seconds_ > 0 ? overlap_seconds_ / copy_seconds_ : 0.0},
                        {"steps", steps_run_},
                        {"ranks", ranks_ ? ranks_->size() : 1}};
    if (!graphs_.note().empty()) m["cuda_graph_note"] = graphs_.note();
    const GpuRuntime runtime = describe_runtime();
    m["cuda_runtime"] = runtime.runtime_version;
    m["cuda_driver"] = runtime.driver_version;
    m["cublas"] = runtime.cublas_version;
    if (multi_rank_) {
      m["allreduce"] = allreduce_metrics_;
      m["per_rank"] = per_rank_metrics_;
    }
    return m;
  }

  std::vector<PinRecord> pin_map() const override {
    if (multi_rank_) return all_pins_;
    return {own_pin_record()};
  }

 private:
  template <class Body>
  void guarded(Body&& body) {
    run_or_end_job(*ranks_, body);
  }

  void prepare_rank(const Model& model, const Dataset& train, const TrainConfig& config) {
    const StrategyOptions options(config, "gpu");
    const int count = device_count_or_fail();
    device_ = parse_device(options, count, ranks_->node_rank() % count);
    mode_ = parse_data_mode(options);
    graphs_ = GraphRunner<CudaApi>(2 * step_parts, parse_graph(options));
    CNNBENCH_CHECK(config.batch > 0, "--batch must be positive");
    CNNBENCH_CHECK(train.image_size() == static_cast<std::size_t>(image_size),
                   "the GPU strategy expects 28x28 images, got " + std::to_string(train.rows) +
                       "x" + std::to_string(train.cols));
    data_ = &train;
    model_kind_ = model.kind;
    batch_ = config.batch;
    share_ = rank_share(batch_, ranks_->size(), ranks_->rank());
    if (config.pin) {
      caller_affinity_.emplace();  // the caller's thread gets its mask back with the strategy
      pin_core_ = ranks_->node_rank();  // ranks on one machine drive their devices from own cores
      pinned_pu_ = pin_current_thread(pin_core_);
    }

    CNNBENCH_CUDA(cudaSetDevice(device_));
    const GpuDevice described = describe_device(device_);
    device_name_ = described.name;
    pci_bus_id_ = described.pci_bus_id;
    compute_ = make_stream();
    copy_ = make_stream();
    blas_ = std::make_unique<CublasHandle>();
    CNNBENCH_CUBLAS(cublasSetStream(blas_->get(), compute_.get()));
    // FP32 products (no TF32) so that the run matches serial; a workspace of our own keeps
    // cuBLAS from allocating while a graph is captured.
    CNNBENCH_CUBLAS(cublasSetMathMode(blas_->get(), CUBLAS_DEFAULT_MATH));
    cublas_workspace_ = DeviceBuffer<char>(std::size_t(32) << 20);
    CNNBENCH_CUBLAS(
        cublasSetWorkspace(blas_->get(), cublas_workspace_.data(), cublas_workspace_.size()));

    // Every upload goes on compute_ and the device is synchronised after them (device_upload.hpp):
    // the copy_ stream, and compute_ itself, are not ordered after the legacy stream.
    CudaApi api{compute_.get()};
    std::vector<Upload> uploads = allocate_model(model, config);
    if (multi_rank_) grads_host_ = PinnedBuffer<float>(model.params.size());
    allocate_step_buffers(model.kind == ModelKind::lenet5);
    const std::vector<float> ones(static_cast<std::size_t>(share_.count), 1.0f);
    uploads.push_back({const_cast<float*>(launch_[0].buffers.ones), ones.data(),
                       sizeof(float) * ones.size()});
    upload_and_settle(api, compute_.get(), std::span<const Upload>(uploads));
    if (mode_ == DataMode::resident) {
      upload_dataset(api, train);
    } else {
      allocate_batch_slots();
    }
    plan_kernel_groups(model.kind == ModelKind::lenet5);
    if (multi_rank_) gather_rank_metrics();
  }

  // Where a step's stamps go (device_timing.hpp), and the breakdown's workers: the device stream
  // of each rank.
  void plan_kernel_groups(bool lenet5) {
    stamps_plan_ = plan_step_stamps(lenet5, multi_rank_);
    for (StepLaunch& launch : launch_) launch.stamps_per_step = stamps_plan_.per_step();
    std::vector<WorkerId> workers;
    std::vector<int> unit_of;
    for (int r = 0; r < ranks_->size(); ++r) {
      workers.push_back({"device", 0, multi_rank_ ? r : -1});
      unit_of.push_back(r);
    }
    breakdown_ = BreakdownBuilder(std::move(workers), multi_rank_ ? "rank" : "device",
                                  std::move(unit_of));
  }

  void run_range(const StepRange& range, const StepCallback& on_step) {
    if (range.count <= 0) return;
    const ClockTicks range_start = clock_ticks();
    host_step_ = range.global_first;
    CNNBENCH_CUDA(cudaSetDevice(device_));
    reserve_range(range.count);
    range_allreduce_seconds_ = 0;
    CNNBENCH_CUDA(cudaMemsetAsync(launch_[0].buffers.step, 0, sizeof(int), compute_.get()));
    if (mode_ == DataMode::resident) {
      run_resident(range);
    } else {
      run_streamed(range);
    }
    CNNBENCH_CUDA(cudaMemcpyAsync(loss_sums_host_.data(), loss_sums_.data(),
                                  sizeof(double) * static_cast<std::size_t>(range.count),
                                  cudaMemcpyDeviceToHost, compute_.get()));
    CNNBENCH_CUDA(cudaMemcpyAsync(stamps_host_.data(), stamps_.data(),
                                  sizeof(std::uint64_t) * stamps_per_range(range.count),
                                  cudaMemcpyDeviceToHost, compute_.get()));
    const ClockTicks wait_start = clock_ticks();
    CNNBENCH_CUDA(cudaStreamSynchronize(compute_.get()));
    const ClockTicks synchronized = clock_ticks();
    host_span(wait_start, synchronized, TimeCategory::other, host_step_ - 1);  // the range's last
    account_timings(range.count);
    replay_device_stamps(range.count, range_start, synchronized);
    steps_run_ += range.count;
    if (multi_rank_) {
      // Each rank holds the loss sums of its shares; the global batch's are their sum.
      ranks_->sum_in_rank_order(loss_sums_host_.data(), static_cast<std::size_t>(range.count));
      gather_rank_metrics();
    }
    for (std::int64_t i = 0; i < range.count; ++i) {
      on_step(i, loss_sums_host_.data()[i] / batch_);
    }
    // The read-back, the replay, the ranks' metrics and the callbacks after the last stamp.
    breakdown_.end_range(1e-9 * double(clock_ticks() - range_start));
  }

  std::size_t stamps_per_range(std::int64_t steps) const {
    return static_cast<std::size_t>(steps) * static_cast<std::size_t>(stamps_plan_.per_step());
  }
  // The range's stamps into the device timeline, then (collective) every rank's steps into the
  // breakdown. The device's clock meets the host's at the last stamp: the step counter's advance,
  // the losses' and the stamps' copies ran between it and `synchronized`, a few microseconds.
  void replay_device_stamps(std::int64_t count, ClockTicks range_start, ClockTicks synchronized) {
    const std::size_t n = stamps_per_range(count);
    const std::uint64_t last = stamps_host_.data()[n - 1];
    const DeviceRangeStamps stamps{std::span<const std::uint64_t>(stamps_host_.data(), n),
                                   range_start, synchronized - static_cast<ClockTicks>(last)};
    device_timeline_.reserve_steps(static_cast<std::size_t>(count));
    device_timeline_.number_steps_from(host_step_ - count);
    replay_device_range(device_timeline_, stamps_plan_.groups, stamps, count,
                        mode_ == DataMode::stream);
    auto steps = gather_step_times(*ranks_, {&device_timeline_});
    std::vector<StepTimes> flat;
    for (auto& by_rank : steps) {
      if (multi_rank_) separate_rank_imbalance(by_rank);
      flat.clear();
      for (const auto& rank : by_rank) flat.insert(flat.end(), rank.begin(), rank.end());
      // Every rank's device steps cover its range: its wall on this rank's clock.
      breakdown_.add_step(flat, by_rank[static_cast<std::size_t>(ranks_->rank())][0].wall);
    }
    device_timeline_.clear_steps();
  }

  // A span of the host thread's track, when a trace keeps them.
  // A span of the host thread's track, when a trace keeps them, in the step the host is at.
  void host_span(ClockTicks start, ClockTicks end, TimeCategory category) {
    host_span(start, end, category, host_step_);
  }
  void host_span(ClockTicks start, ClockTicks end, TimeCategory category, std::int64_t step) {
    if (!host_spans_) return;
    Span span;
    span.start = start;
    span.end = end;
    span.step = step;
    span.category = category;
    host_spans_->push(span);
  }
  // The host has enqueued step host_step_: its later spans belong to the next one.
  void host_step_done() {
    if (host_spans_) host_spans_->end_step();
    ++host_step_;
  }

  PinRecord own_pin_record() const {
    const std::string worker =
        multi_rank_ ? "gpu/rank" + std::to_string(ranks_->rank()) + "/host" : "gpu/host";
    if (pinned_pu_ < 0) return {worker, -1, -1, current_cpu()};
    return {worker, pin_core_, pinned_pu_, current_cpu()};
  }

  // Allocates parameters, gradients and momentum on the device; returns their uploads.
  std::vector<Upload> allocate_model(const Model& model, const TrainConfig& config) {
    const std::size_t n = model.params.size();
    params_ = DeviceBuffer<float>(n);
    grads_ = DeviceBuffer<float>(n);
    momentum_ = DeviceBuffer<float>(n);

    set_model_tensors(launch_[0], model, config, params_.data(), grads_.data(), momentum_.data());
    return {{params_.data(), model.params.data(), sizeof(float) * n},
            {momentum_.data(), model.momentum.data(), sizeof(float) * n},
            {grads_.data(), nullptr, sizeof(float) * n}};
  }

  // Activations for this rank's share of the batch (the whole batch on one rank).
  void allocate_step_buffers(bool lenet5) {
    step_memory_ = DeviceBuffer<char>(step_memory_bytes(lenet5, share_.count));
    launch_[0].buffers = carve_step_buffers(step_memory_.data(), lenet5, share_.count);
    launch_[1] = launch_[0];
  }

  void upload_dataset(CudaApi& api, const Dataset& train) {
    const double start = now_seconds();
    images_ = DeviceBuffer<std::uint8_t>(train.images.size());
    labels_ = DeviceBuffer<std::uint8_t>(train.labels.size());
    const std::array<Upload, 2> uploads = {
        Upload{images_.data(), train.images.data(), train.images.size()},
        Upload{labels_.data(), train.labels.data(), train.labels.size()}};
    upload_and_settle(api, compute_.get(), std::span<const Upload>(uploads));
    dataset_upload_seconds_ = now_seconds() - start;
    launch_[0].source = {images_.data(), labels_.data(), nullptr};  // indices set per range
  }

  // Two batch slots (S images then S labels, S = this rank's share), pinned on the host and on
  // the device.
  void allocate_batch_slots() {
    const auto share = static_cast<std::size_t>(share_.count);
    const std::size_t bytes = share * (image_size + 1);
    for (int slot = 0; slot < 2; ++slot) {
      slot_host_[slot] = PinnedBuffer<std::uint8_t>(bytes);
      slot_device_[slot] = DeviceBuffer<std::uint8_t>(bytes);
      const std::uint8_t* base = slot_device_[slot].data();
      launch_[slot].source = {base, base + share * image_size, nullptr};
    }
  }

  // Per-range arrays: indices (resident), loss sums and timing events. Growing them moves
  // pointers that captured graphs hold, so those graphs are dropped and captured again.
  void reserve_range(std::int64_t count) {
    const auto n = static_cast<std::size_t>(count);
    if (loss_sums_.size() < n) {
      loss_sums_ = DeviceBuffer<double>(n);
      loss_sums_host_ = PinnedBuffer<double>(n);
      if (mode_ == DataMode::resident) {
        const std::size_t index_count = n * static_cast<std::size_t>(share_.count);
        indices_ = DeviceBuffer<std::uint32_t>(index_count);
        indices_host_ = PinnedBuffer<std::uint32_t>(index_count);
      }
      stamps_ = DeviceBuffer<std::uint64_t>(stamps_per_range(count));  // (steps, groups + 1)
      stamps_host_ = PinnedBuffer<std::uint64_t>(stamps_.size());
      for (int slot = 0; slot < 2; ++slot) {
        launch_[slot].stamps = stamps_.data();
        launch_[slot].buffers.step_loss_sums = loss_sums_.data();
        if (mode_ == DataMode::resident) launch_[slot].source.indices = indices_.data();
      }
      graphs_.drop_all();
    }
    const std::size_t events = mode_ == DataMode::stream ? n : 1;
    while (copy_start_.size() < events) {
      copy_start_.push_back(make_event());
      copy_end_.push_back(make_event());
      compute_start_.push_back(make_event());
      compute_end_.push_back(make_event());
    }
  }

  void run_resident(const StepRange& range) {
    const auto share = static_cast<std::size_t>(share_.count);
    const auto index_count = static_cast<std::size_t>(range.count) * share;
    const std::uint32_t* order = range.order + range.first * batch_;
    const ClockTicks gather_start = clock_ticks();
    // The copy goes from pinned memory (range.order is pageable; the previous range's copy has
    // finished: run_range waits for compute_). The gather reads (steps, S) indices: this rank's
    // columns of the range's (steps, B), all of it on one rank.
    if (share_.count == batch_) {
      std::memcpy(indices_host_.data(), order, sizeof(std::uint32_t) * index_count);
    } else {
      for (std::int64_t i = 0; i < range.count; ++i) {
        std::memcpy(indices_host_.data() + static_cast<std::size_t>(i) * share,
                    order + i * batch_ + share_.offset, sizeof(std::uint32_t) * share);
      }
    }
    host_span(gather_start, clock_ticks(), TimeCategory::data);
    CNNBENCH_CUDA(cudaEventRecord(copy_start_[0].get(), compute_.get()));
    CNNBENCH_CUDA(cudaMemcpyAsync(indices_.data(), indices_host_.data(),
                                  sizeof(std::uint32_t) * index_count, cudaMemcpyHostToDevice,
                                  compute_.get()));
    CNNBENCH_CUDA(cudaEventRecord(copy_end_[0].get(), compute_.get()));
    copy_bytes_ += static_cast<double>(sizeof(std::uint32_t) * index_count);
    CNNBENCH_CUDA(cudaEventRecord(compute_start_[0].get(), compute_.get()));
    for (std::int64_t i = 0; i < range.count; ++i) run_step(0);
    CNNBENCH_CUDA(cudaEventRecord(compute_end_[0].get(), compute_.get()));
  }

  // Step i computes from slot i % 2 while the copy of step i + 1 fills the other slot.
  void run_streamed(const StepRange& range) {
    const std::uint32_t* order = range.order + range.first * batch_;
    auto prefetch = [&](std::int64_t i) {
      const int slot = static_cast<int>(i % 2);
      // The host slot is free once its previous copy is done; the device slot once the step
      // that read it (i - 2) has finished.
      if (i >= 2) CNNBENCH_CUDA(cudaEventSynchronize(copy_end_[i - 2].get()));
      const ClockTicks gather_start = clock_ticks();
      gather_batch_bytes(slot_host_[slot].data(), order + i * batch_ + share_.offset);
      host_span(gather_start, clock_ticks(), TimeCategory::data);
      if (i >= 2) CNNBENCH_CUDA(cudaStreamWaitEvent(copy_.get(), compute_end_[i - 2].get(), 0));
      CNNBENCH_CUDA(cudaEventRecord(copy_start_[i].get(), copy_.get()));
      CNNBENCH_CUDA(cudaMemcpyAsync(slot_device_[slot].data(), slot_host_[slot].data(),
                                    slot_host_[slot].size(), cudaMemcpyHostToDevice, copy_.get()));
      CNNBENCH_CUDA(cudaEventRecord(copy_end_[i].get(), copy_.get()));
      copy_bytes_ += static_cast<double>(slot_host_[slot].size());
    };
    prefetch(0);
    if (range.count > 1) prefetch(1);
    for (std::int64_t i = 0; i < range.count; ++i) {
      CNNBENCH_CUDA(cudaStreamWaitEvent(compute_.get(), copy_end_[i].get(), 0));
      CNNBENCH_CUDA(cudaEventRecord(compute_start_[i].get(), compute_.get()));
      run_step(static_cast<int>(i % 2));
      CNNBENCH_CUDA(cudaEventRecord(compute_end_[i].get(), compute_.get()));
      if (i + 2 < range.count) prefetch(i + 2);
    }
  }

  // images (S,784) then labels (S) of the samples order[0..S), S = this rank's share.
  void gather_batch_bytes(std::uint8_t* slot, const std::uint32_t* order) const {
    const std::size_t size = data_->image_size();
    std::uint8_t* labels = slot + static_cast<std::size_t>(share_.count) * size;
    for (int b = 0; b < share_.count; ++b) {
      std::memcpy(slot + b * size, data_->images.data() + order[b] * size, size);
      labels[b] = data_->labels[order[b]];
    }
  }

  // One step from batch slot `slot`. On one rank it is all enqueued; with several ranks the host
  // waits for this rank's gradients, sums them over the ranks, and enqueues the update.
  // The host track shows the enqueues as `other`, the wait for this rank's gradients and their
  // sum over the ranks as `communication_exposed`.
  void run_step(int slot) {
    const ClockTicks enqueue_start = clock_ticks();
    if (!multi_rank_) {
      enqueue_part(slot, StepPart::whole_step);
      host_span(enqueue_start, clock_ticks(), TimeCategory::other);
      host_step_done();
      return;
    }
    enqueue_part(slot, StepPart::forward_backward);
    const ClockTicks wait_start = clock_ticks();
    host_span(enqueue_start, wait_start, TimeCategory::other);
    CNNBENCH_CUDA(cudaStreamSynchronize(compute_.get()));
    const double start = now_seconds();
    ranks_->sum_in_rank_order(grads_host_.data(), grads_host_.size());
    const double seconds = now_seconds() - start;
    allreduce_seconds_ += seconds;
    range_allreduce_seconds_ += seconds;
    allreduce_steps_ += 1;
    const ClockTicks update_start = clock_ticks();
    host_span(wait_start, update_start, TimeCategory::communication_exposed);
    enqueue_part(slot, StepPart::update);
    host_span(update_start, clock_ticks(), TimeCategory::other);
    host_step_done();
  }

  // With graphs on, the first time a slot runs a part it runs eagerly (that loads every kernel
  // and cuBLAS's own) and is then captured; later it is one graph launch (graph_runner.hpp).
  void enqueue_part(int slot, StepPart part) {
    CudaApi api{compute_.get()};
    const auto key = static_cast<std::size_t>(slot) * step_parts + static_cast<std::size_t>(part);
    graphs_.run(api, key, [&] { enqueue_part_eagerly(slot, part); });
  }

  void enqueue_part_eagerly(int slot, StepPart part) {
    const StepLaunch& step = launch_[slot];
    const std::size_t grad_bytes = sizeof(float) * grads_.size();
    if (part != StepPart::update) enqueue_forward_backward(step, compute_.get(), blas_->get());
    // With several ranks the two copies are the communication groups before the update's.
    if (part == StepPart::forward_backward) {
      CNNBENCH_CUDA(cudaMemcpyAsync(grads_host_.data(), grads_.data(), grad_bytes,
                                    cudaMemcpyDeviceToHost, compute_.get()));
      enqueue_stamp(step, compute_.get(), stamps_plan_.gradients_to_host_slot);
    }
    if (part == StepPart::update) {
      CNNBENCH_CUDA(cudaMemcpyAsync(grads_.data(), grads_host_.data(), grad_bytes,
                                    cudaMemcpyHostToDevice, compute_.get()));
      enqueue_stamp(step, compute_.get(), stamps_plan_.gradients_back_slot);
    }
    if (part != StepPart::forward_backward) {
      enqueue_update(step, compute_.get(), stamps_plan_.update_slot);
    }
  }

  // compute_seconds leaves out the time the device waited for the ranks' gradient sum.
  void account_timings(std::int64_t count) {
    if (mode_ == DataMode::resident) {
      copy_seconds_ += elapsed_seconds(copy_start_[0], copy_end_[0]);
      compute_seconds_ +=
          elapsed_seconds(compute_start_[0], compute_end_[0]) - range_allreduce_seconds_;
      return;
    }
    double copy = 0, compute = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      copy += elapsed_seconds(copy_start_[i], copy_end_[i]);
      compute += elapsed_seconds(compute_start_[i], compute_end_[i]);
    }
    copy_seconds_ += copy;
    compute_seconds_ += compute - range_allreduce_seconds_;
    // Copy time that ran under compute: the busy times add up to more than the wall span.
    const double span = elapsed_seconds(copy_start_[0], compute_end_[count - 1]);
    overlap_seconds_ += std::clamp(copy + compute - span, 0.0, copy);
  }

  // Collective: every rank's device, timings and pin record, so that rank 0 can report them.
  void gather_rank_metrics() {
    const nlohmann::json mine = rank_entry(*ranks_,
                                           {{strategy_option::device.name, device_},
                                            {"device_name", device_name_},
                                            {"pci_bus_id", pci_bus_id_},
                                            {"batch_offset", share_.offset},
                                            {"samples_per_step", share_.count},
                                            {"allreduce_s", allreduce_seconds_},
                                            {"compute_s", compute_seconds_}},
                                           own_pin_record());
    const double payload = static_cast<double>(sizeof(float) * grads_.size());
    RankMetrics all = gpu::gather_rank_metrics(*ranks_, mine, payload, allreduce_steps_);
    per_rank_metrics_ = std::move(all.per_rank);
    allreduce_metrics_ = std::move(all.allreduce);
    all_pins_ = std::move(all.pins);
  }

  // Configuration
  std::unique_ptr<RankGroup> ranks_;
  bool multi_rank_ = false;
  RankShare share_;  // of each global batch; the whole batch on one rank
  int pin_core_ = 0;
  int device_ = 0;
  DataMode mode_ = DataMode::resident;
  int batch_ = 0;
  ModelKind model_kind_ = ModelKind::lenet5;
  const Dataset* data_ = nullptr;
  int pinned_pu_ = -1;
  std::optional<AffinityGuard> caller_affinity_;
  std::string device_name_, pci_bus_id_;

  // Device state. Members go in reverse order: cuBLAS's handle before its workspace, both before
  // the streams.
  Stream compute_, copy_;
  DeviceBuffer<char> cublas_workspace_;
  std::unique_ptr<CublasHandle> blas_;
  DeviceBuffer<float> params_, grads_, momentum_;
  DeviceBuffer<char> step_memory_;
  DeviceBuffer<std::uint8_t> images_, labels_;     // resident
  DeviceBuffer<std::uint32_t> indices_;            // resident: (steps, S) of the range
  PinnedBuffer<std::uint32_t> indices_host_;       // resident: staging of indices_
  PinnedBuffer<float> grads_host_;                  // several ranks: where gradients are summed
  std::array<PinnedBuffer<std::uint8_t>, 2> slot_host_;  // stream
  std::array<DeviceBuffer<std::uint8_t>, 2> slot_device_;
  DeviceBuffer<double> loss_sums_;
  PinnedBuffer<double> loss_sums_host_;
  DeviceBuffer<std::uint64_t> stamps_;  // device timer per step and kernel group (device_timing)
  PinnedBuffer<std::uint64_t> stamps_host_;
  std::array<StepLaunch, 2> launch_{};  // per batch slot (resident uses slot 0)
  GraphRunner<CudaApi> graphs_{2 * step_parts, true};  // [slot * step_parts + StepPart]
  std::vector<Event> copy_start_, copy_end_, compute_start_, compute_end_;
  StepStampPlan stamps_plan_;  // which stamp slot ends which kernel group

  // Where the time goes
  StepTimeline device_timeline_;           // the device stream's steps of the current range
  BreakdownBuilder breakdown_;
  std::unique_ptr<SpanRing> host_spans_, device_spans_;  // --trace only
  std::int64_t trace_steps_ = 0;
  std::int64_t host_step_ = 0;  // the global step the host enqueues (its spans' step)

  // Metrics
  double dataset_upload_seconds_ = 0, copy_seconds_ = 0, copy_bytes_ = 0;
  double compute_seconds_ = 0, overlap_seconds_ = 0;
  std::int64_t steps_run_ = 0;
  double allreduce_seconds_ = 0, range_allreduce_seconds_ = 0;
  std::int64_t allreduce_steps_ = 0;
  nlohmann::json allreduce_metrics_ = nlohmann::json::object();
  nlohmann::json per_rank_metrics_ = nlohmann::json::array();
  std::vector<PinRecord> all_pins_;
};

}  // namespace

std::unique_ptr<Strategy> make_gpu_strategy_on_device() { return std::make_unique<GpuStrategy>(); }

}  // namespace cnnbench::gpu
