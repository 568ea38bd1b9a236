// The report of one `cnnbench train` run (schema: results/schema/run-report.schema.json).
#include <algorithm>
#include <numeric>

#include "cnnbench/core.hpp"
#include "cnnbench/machine.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

namespace {

// The shard layout (docs/design.md, "Sample order"): every block's samples, and with
// --shard-data what the rank holding it read.
nlohmann::json blocks_json(const TrainConfig& config, const Dataset& train,
                           const std::vector<ProcessRecord>& processes) {
  nlohmann::json blocks = nlohmann::json::array();
  for (int r = 0; r < config.shards; ++r) {
    const DataBlock block = data_block(train.set_size(), config.shards, r);
    nlohmann::json entry = {{"shard", r}, {"first", block.first}, {"count", block.count}};
    const auto rank = static_cast<std::size_t>(r);
    if (config.shard_data && rank < processes.size()) entry["source"] = processes[rank].source;
    blocks.push_back(entry);
  }
  return blocks;
}

nlohmann::json config_json(const TrainConfig& config, const Dataset& train,
                           const RunResult& result) {
  nlohmann::json json = config;
  json["steps"] = result.total_steps;  // an epoch run's too, not the -1 that stands for "by epochs"
  json["data"] = {{"source", train.source}, {"train_samples", train.set_size()}};
  if (config.shards > 1) json["data"]["blocks"] = blocks_json(config, train, result.processes);
  return json;
}

// Mean loss of the last min(100, n) steps: one number that is not the noise of a single batch.
double final_loss(const std::vector<double>& losses) {
  if (losses.empty()) return 0;
  const std::size_t n = std::min<std::size_t>(100, losses.size());
  return std::accumulate(losses.end() - static_cast<std::ptrdiff_t>(n), losses.end(), 0.0) /
         static_cast<double>(n);
}

// Each process's peak memory at the end of training, in rank order.
nlohmann::json peak_rss_by_rank(const std::vector<ProcessRecord>& processes) {
  nlohmann::json values = nlohmann::json::array();
  for (const ProcessRecord& process : processes) values.push_back(process.peak_rss_bytes);
  return values;
}

}  // namespace

nlohmann::json make_run_report(const TrainConfig& config, const Dataset& train,
                               const RunResult& result) {
  const ModelSpec& spec = model_spec(config.model);
  const double images = static_cast<double>(result.steps_run) * config.batch;
  nlohmann::json metrics = {
      {"images_per_s", result.images_per_s},
      {"train_seconds", result.train_seconds},
      {"steps", result.steps_run},
      {"images", images},
      {"global_step", result.progress.global_step},
      {"final_loss", final_loss(result.step_losses)},
      {"last_step_loss", result.last_step_loss},
      {"epoch_mean_loss", result.epoch_mean_loss},
      {"gflops", result.images_per_s * spec.train_flops_per_image / 1e9},
      {"train_flops_per_image", spec.train_flops_per_image},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"peak_rss_bytes_by_rank", peak_rss_by_rank(result.processes)},
      {"interrupted", result.interrupted},
  };
  // The fraction of one core's measured SGEMM rate this run achieved; measured only here, when a
  // report is written, and after training so that it costs the run nothing.
  const double peak = measure_sgemm_peak(1, 0.3).at("gflops").get<double>();
  metrics["sgemm_peak_gflops"] = peak;
  if (peak > 0) metrics["peak_fraction"] = metrics["gflops"].get<double>() / peak;
  // A count of the strategy's own (cluster: the intra-node reduction's), shown with the rates.
  if (result.strategy_metrics.is_object() && result.strategy_metrics.contains("reduce_bytes_per_thread")) {
    metrics["reduce_bytes_per_thread"] = result.strategy_metrics.at("reduce_bytes_per_thread");
  }
  if (result.test) {
    metrics["test_accuracy"] = result.test->accuracy;
    metrics["test_loss"] = result.test->loss;
    metrics["test_samples"] = result.test->count;
  }
  if (result.time_breakdown.measured()) {
    metrics["time_breakdown"] = time_breakdown_json(result.time_breakdown);
    metrics["straggler"] = straggler_json(result.time_breakdown);
  }
  nlohmann::json epochs = nlohmann::json::array();
  for (const auto& e : result.epochs) {
    epochs.push_back({{"epoch", e.epoch}, {"steps", e.steps}, {"mean_loss", e.mean_loss},
                      {"seconds", e.seconds}});
  }
  nlohmann::json report = {
      {"schema_version", report_schema_version},
      {"kind", "run"},
      {"status", result.diverged_at_step ? "diverged" : "ok"},
      {"context", collect_context()},
      {"config", config_json(config, train, result)},
      {"metrics", metrics},
      {"epochs", epochs},
      {"loss_curve", result.step_losses},
      {"pin_map", pin_map_json(result.pins)},
      {"strategy_metrics", result.strategy_metrics},
  };
  if (result.diverged_at_step) {
    report["diverged_at_step"] = *result.diverged_at_step;
    report["reason"] = divergence_text(*result.diverged_at_step, result.diverged_loss);
  }
  return report;
}

}  // namespace cnnbench
