// The GPU strategy: serial's training step on one CUDA device. It differs from serial in one
// visible way: every step (gather, forward, backward, SGD) is enqueued on a device stream, as
// one CUDA graph launch when capture works, and the host only reads the losses back per range.
// Data: "resident" uploads the data set once; "stream" copies each batch from pinned memory on a
// second stream, double-buffered, so the copy of step i+1 runs under the compute of step i.
// Under mpirun every rank drives one device and computes its share of each global batch; the
// gradients meet in pinned host memory, are summed over the ranks, and go back for the update.
// Where the time goes: the device stamps its timer at each kernel group's end (device_timing.hpp),
// read back with the losses; the device stream is the breakdown's worker and a trace track
// (thread 1) beside the host thread's (thread 0). The class is defined in two files:
// gpu_strategy.cpp (the Strategy interface and a rank's setup) and gpu_strategy_steps.cpp (the
// ranges of steps).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../rank_group.hpp"
#include "../rank_share.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/step_timeline.hpp"
#include "cnnbench/time_breakdown.hpp"
#include "cnnbench/topology.hpp"
#include "cnnbench/trace.hpp"
#include "cnnbench/train.hpp"
#include "cuda_api.hpp"
#include "device_memory.hpp"
#include "device_timing.hpp"
#include "device_upload.hpp"
#include "graph_runner.hpp"
#include "step_launch.hpp"

namespace cnnbench::gpu {

enum class DataMode { resident, stream };

// The parts of a step a graph can hold: the whole step on one rank; with several ranks the host
// sums the gradients between forward_backward (ending with the copy device -> host) and update
// (starting with the copy host -> device).
enum class StepPart { whole_step, forward_backward, update };
inline constexpr int step_parts = 3;

class GpuStrategy final : public Strategy {
 public:
  GpuStrategy();
  ~GpuStrategy() override;

  std::string name() const override { return "gpu"; }
  bool is_primary() const override { return !ranks_ || ranks_->rank() == 0; }

  bool agree_to_stop(bool requested) override;
  void prepare(const Model& model, const Dataset& train, const TrainConfig& config) override;
  void run_steps(const StepRange& range, const StepCallback& on_step) override;
  void sync_to(Model& model) override;
  void keep_trace(std::int64_t steps) override;
  // Collective on a multi-rank job (every rank's tracks on rank 0). The ranks of one machine
  // share its steady clock; GPU ranks on several machines are not aligned.
  Trace trace() override;
  TimeBreakdown time_breakdown() const override;
  nlohmann::json metrics() const override;
  std::vector<PinRecord> pin_map() const override;

 private:
  template <class Body>
  void guarded(Body&& body) {
    run_or_end_job(*ranks_, body);
  }

  // A rank's setup (gpu_strategy.cpp)
  void prepare_rank(const Model& model, const Dataset& train, const TrainConfig& config);
  void plan_kernel_groups(bool lenet5);
  PinRecord own_pin_record() const;
  std::vector<Upload> allocate_model(const Model& model, const TrainConfig& config);
  void allocate_step_buffers(bool lenet5);
  void upload_dataset(CudaApi& api, const Dataset& train);
  void allocate_batch_slots();
  void gather_rank_metrics();

  // Ranges of steps (gpu_strategy_steps.cpp)
  void run_range(const StepRange& range, const StepCallback& on_step);
  std::size_t stamps_per_range(std::int64_t steps) const;
  void replay_device_stamps(std::int64_t count, ClockTicks range_start, ClockTicks synchronized);
  void host_span(ClockTicks start, ClockTicks end, TimeCategory category);
  void host_span(ClockTicks start, ClockTicks end, TimeCategory category, std::int64_t step);
  void host_step_done();
  void reserve_range(std::int64_t count);
  void run_resident(const StepRange& range);
  void run_streamed(const StepRange& range);
  void gather_batch_bytes(std::uint8_t* slot, const std::uint32_t* order) const;
  void run_step(int slot);
  void enqueue_part(int slot, StepPart part);
  void enqueue_part_eagerly(int slot, StepPart part);
  void account_timings(std::int64_t count);

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

}  // namespace cnnbench::gpu
