// The serial strategy: the clean, minimal reference. One thread gathers a batch, runs
// forward + backward of the whole model and applies SGD. The "blas" baseline is the same code
// with the dense layers on OpenBLAS sgemm, allowed N threads, i.e. what a library's intra-op
// threading alone gives.
#include <algorithm>
#include <optional>
#include <string>

#include "../factories.hpp"
#include "../strategy_options.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/time_breakdown.hpp"
#include "cnnbench/topology.hpp"

namespace cnnbench {

namespace {

// --pin-core N or the last core.
int pin_core_of(const StrategyOptions& options, int cores) {
  const int core = options.whole_number(strategy_option::pin_core).value_or(cores - 1);
  if (core >= cores) {
    fail("--pin-core " + std::to_string(core) + ": expected a core number from 0 to " +
         std::to_string(cores - 1) + " (this machine has " + std::to_string(cores) + " cores)");
  }
  return core;
}

class SerialStrategy final : public Strategy {
 public:
  explicit SerialStrategy(bool blas_baseline) : blas_baseline_(blas_baseline) {}

  std::string name() const override { return blas_baseline_ ? "blas" : "serial"; }

  void prepare(const Model& model, const Dataset& train, const TrainConfig& config) override {
    const StrategyOptions options(config, name());
    model_ = std::make_unique<Model>(model);
    data_ = &train;
    config_ = config;
    // The blas baseline runs its dense layers on sgemm, so that it measures OpenBLAS's threading.
    workspace_ = std::make_unique<Workspace>(
        model.kind, config.batch, blas_baseline_ ? DenseBackend::sgemm : DenseBackend::own);
    workspace_->set_timeline(&timeline_);
    breakdown_ = BreakdownBuilder({{"thread", 0}}, "thread", {0});
    x_.assign(static_cast<std::size_t>(config.batch) * train.image_size(), 0.0f);
    y_.assign(static_cast<std::size_t>(config.batch), 0);
    threads_ = blas_baseline_ ? std::max(1, config.threads) : 1;
    set_blas_threads(threads_);
    if (config.pin && !blas_baseline_) {
      caller_affinity_.emplace();  // the caller's thread gets its mask back with the strategy
      // By default the last core: core 0 takes most of the OS's interrupts and housekeeping
      // (measured on the 2-core machine: serial LeNet-5 ran 8% slower pinned to core 0 than to
      // core 1). The sweep measures the baseline on more than one core (--pin-core).
      pinned_core_ = pin_core_of(options, machine_topology().cores);
      pinned_pu_ = pin_current_thread(pinned_core_);
    }
  }

  void run_steps(const StepRange& range, const StepCallback& on_step) override {
    const ClockTicks range_start = clock_ticks();
    const int batch = config_.batch;
    const float grad_scale = 1.0f / static_cast<float>(batch);
    Model& m = *model_;
    // Backward writes the gradient over the last step's (GradientWrite::overwrite), which saves
    // a pass clearing it (FC-3's is 1 MB, 3% of a step in a separate memset) and backward's read
    // of it.
    float* const grads = m.grads.data();
    timeline_.reserve_steps(static_cast<std::size_t>(range.count));
    timeline_.number_steps_from(range.global_first);
    for (std::int64_t i = 0; i < range.count; ++i) {
      const std::uint32_t* indices = range.order + (range.first + i) * batch;
      timeline_.begin_step();
      // The whole step is work on this thread, unless OpenBLAS's own threads take part of it
      // (and this one waits for them): then the OS's share is not measured.
      if (threads_ == 1) timeline_.begin_work();
      gather_batch(x_.data(), y_.data(), *data_, indices, batch);
      timeline_.close(TimeCategory::data);
      const double loss_sum =
          forward_backward(m.kind, m.params.data(), grads, x_.data(), y_.data(), batch,
                           grad_scale, *workspace_, GradientWrite::overwrite);
      sgd_step(m.params.data(), grads, m.momentum.data(), m.params.size(), config_.sgd);
      timeline_.close(TimeCategory::update);
      if (threads_ == 1) timeline_.end_work();
      timeline_.end_step();
      on_step(i, loss_sum / batch);
    }
    for (const StepTimes& step : timeline_.steps()) breakdown_.add_step({&step, 1}, step.wall);
    timeline_.clear_steps();
    breakdown_.end_range(1e-9 * double(clock_ticks() - range_start));
  }

  void sync_to(Model& model) override {
    model.params = model_->params;
    model.momentum = model_->momentum;
  }

  nlohmann::json metrics() const override { return {{"blas_threads", threads_}}; }
  void keep_trace(std::int64_t steps) override {
    spans_ = std::make_unique<SpanRing>(static_cast<std::size_t>(steps), spans_per_step_guess);
    timeline_.record_spans(spans_.get());
  }
  Trace trace() override {
    if (!spans_) return {};
    Trace out;
    out.tracks.push_back({0, 0, spans_->spans(), name() + "/main", spans_->first_whole_step()});
    return out;
  }
  TimeBreakdown time_breakdown() const override {
    return breakdown_.result(timed_layer_names(config_.model));
  }

  std::vector<PinRecord> pin_map() const override {
    if (pinned_pu_ < 0) return {{name() + "/main", -1, -1, current_cpu()}};
    return {{name() + "/main", pinned_core_, pinned_pu_, current_cpu()}};
  }

 private:
  bool blas_baseline_;
  std::optional<AffinityGuard> caller_affinity_;
  std::unique_ptr<Model> model_;
  const Dataset* data_ = nullptr;
  TrainConfig config_;
  std::unique_ptr<Workspace> workspace_;
  StepTimeline timeline_;  // the one thread's steps of the current range
  std::unique_ptr<SpanRing> spans_;  // --trace only
  BreakdownBuilder breakdown_;
  aligned_vector<float> x_;
  std::vector<std::uint8_t> y_;
  int threads_ = 1;
  int pinned_core_ = -1;
  int pinned_pu_ = -1;
};

}  // namespace

std::unique_ptr<Strategy> make_serial_strategy() { return std::make_unique<SerialStrategy>(false); }
std::unique_ptr<Strategy> make_blas_strategy() { return std::make_unique<SerialStrategy>(true); }

}  // namespace cnnbench
