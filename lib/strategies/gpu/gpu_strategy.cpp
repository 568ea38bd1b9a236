// The GPU strategy's (gpu_strategy.hpp) side that faces the driver: the Strategy interface, a
// rank's setup (its device, streams and cuBLAS handle, the model's, the step's and the data's
// buffers on the device, the breakdown's workers) and the metrics and pin records it reports.
// The ranges of steps are gpu_strategy_steps.cpp.
#include "gpu_strategy.hpp"

#include <exception>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../cluster/cluster_metrics.hpp"
#include "../strategy_options.hpp"
#include "cnnbench/core.hpp"
#include "device_count.hpp"
#include "module.hpp"
#include "rank_metrics.hpp"
#include "step_layout.hpp"

namespace cnnbench::gpu {

namespace {

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

DataMode parse_data_mode(const StrategyOptions& options) {
  return options.is(strategy_option::gpu_data, "stream") ? DataMode::stream : DataMode::resident;
}

bool parse_graph(const StrategyOptions& options) {
  return options.is(strategy_option::gpu_graph, "on");
}

}  // namespace

GpuStrategy::GpuStrategy() { device_count_or_fail(); }

GpuStrategy::~GpuStrategy() {
  // The members free device memory and handles of device_, which must be this thread's device.
  if (compute_) (void)cudaSetDevice(device_);
  // Work still queued must finish before the memory it uses goes away.
  if (compute_) (void)cudaStreamSynchronize(compute_.get());
  if (copy_) (void)cudaStreamSynchronize(copy_.get());
  // Leaving because of an error: other ranks may wait in a collective, so end the whole job.
  if (ranks_ && std::uncaught_exceptions() > 0) ranks_->end_job_at_exit();
}

bool GpuStrategy::agree_to_stop(bool requested) {
  if (!ranks_) return requested;
  bool stop = requested;
  guarded([&] { stop = ranks_->any_rank(requested); });
  return stop;
}

void GpuStrategy::prepare(const Model& model, const Dataset& train, const TrainConfig& config) {
  ranks_ = join_rank_group();
  multi_rank_ = ranks_->size() > 1;
  guarded([&] { prepare_rank(model, train, config); });
}

void GpuStrategy::run_steps(const StepRange& range, const StepCallback& on_step) {
  guarded([&] { run_range(range, on_step); });
}

void GpuStrategy::sync_to(Model& model) {
  CNNBENCH_CUDA(cudaSetDevice(device_));
  CNNBENCH_CUDA(cudaStreamSynchronize(compute_.get()));
  CNNBENCH_CUDA(cudaMemcpy(model.params.data(), params_.data(), sizeof(float) * params_.size(),
                           cudaMemcpyDeviceToHost));
  CNNBENCH_CUDA(cudaMemcpy(model.momentum.data(), momentum_.data(),
                           sizeof(float) * momentum_.size(), cudaMemcpyDeviceToHost));
}

void GpuStrategy::keep_trace(std::int64_t steps) {
  trace_steps_ = steps;
  host_spans_ = std::make_unique<SpanRing>(static_cast<std::size_t>(steps), spans_per_step_guess);
  device_spans_ = std::make_unique<SpanRing>(static_cast<std::size_t>(steps), spans_per_step_guess);
  device_timeline_.record_spans(device_spans_.get());
}

Trace GpuStrategy::trace() {
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

TimeBreakdown GpuStrategy::time_breakdown() const {
  return breakdown_.result(timed_layer_names(model_kind_));
}

nlohmann::json GpuStrategy::metrics() const {
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

std::vector<PinRecord> GpuStrategy::pin_map() const {
  if (multi_rank_) return all_pins_;
  return {own_pin_record()};
}

void GpuStrategy::prepare_rank(const Model& model, const Dataset& train,
                               const TrainConfig& config) {
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
void GpuStrategy::plan_kernel_groups(bool lenet5) {
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

PinRecord GpuStrategy::own_pin_record() const {
  const std::string worker =
      multi_rank_ ? "gpu/rank" + std::to_string(ranks_->rank()) + "/host" : "gpu/host";
  if (pinned_pu_ < 0) return {worker, -1, -1, current_cpu()};
  return {worker, pin_core_, pinned_pu_, current_cpu()};
}

// Allocates parameters, gradients and momentum on the device; returns their uploads.
std::vector<Upload> GpuStrategy::allocate_model(const Model& model, const TrainConfig& config) {
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
void GpuStrategy::allocate_step_buffers(bool lenet5) {
  step_memory_ = DeviceBuffer<char>(step_memory_bytes(lenet5, share_.count));
  launch_[0].buffers = carve_step_buffers(step_memory_.data(), lenet5, share_.count);
  launch_[1] = launch_[0];
}

void GpuStrategy::upload_dataset(CudaApi& api, const Dataset& train) {
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
void GpuStrategy::allocate_batch_slots() {
  const auto share = static_cast<std::size_t>(share_.count);
  const std::size_t bytes = share * (image_size + 1);
  for (int slot = 0; slot < 2; ++slot) {
    slot_host_[slot] = PinnedBuffer<std::uint8_t>(bytes);
    slot_device_[slot] = DeviceBuffer<std::uint8_t>(bytes);
    const std::uint8_t* base = slot_device_[slot].data();
    launch_[slot].source = {base, base + share * image_size, nullptr};
  }
}

// Collective: every rank's device, timings and pin record, so that rank 0 can report them.
void GpuStrategy::gather_rank_metrics() {
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

std::unique_ptr<Strategy> make_gpu_strategy_on_device() { return std::make_unique<GpuStrategy>(); }

}  // namespace cnnbench::gpu
