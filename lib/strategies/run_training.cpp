// The training driver shared by every strategy: initial weights (seeded, --init or --resume), the
// step schedule of docs/design.md (epoch e visits epoch_order(e); step k uses samples [kB, (k+1)B);
// a final partial batch is dropped; with --shards N the order of N blocks, "Sample order"),
// progress, checkpoints and evaluation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/train.hpp"
#include "rank_group.hpp"

namespace cnnbench {

namespace {

// Ranges are cut at most this long, and at most this many images, so that a stop request lands
// within a fraction of a second at any batch size (200 steps of batch 4096 took 16 s).
constexpr std::int64_t max_steps_per_range = 200;
constexpr std::int64_t max_images_per_range = 200 * 64;

// The settings a resumed run changes from the checkpoint's run: allowed (the run continues from
// the same step), but the result is no longer the uninterrupted run's, so each is said.
std::vector<std::string> resume_changes(const TrainProgress& saved, const TrainConfig& config,
                                        const Dataset& train, const std::string& file) {
  std::vector<std::string> changes;
  const auto compare = [&](const std::string& flag, float before, float now) {
    if (before != now) {
      changes.push_back("--resume " + file + ": the checkpoint was trained with " + flag + " " +
                        float_text(before) + ", this run uses " + flag + " " + float_text(now));
    }
  };
  if (saved.sgd) {
    compare("--lr", saved.sgd->lr, config.sgd.lr);
    compare("--momentum", saved.sgd->momentum, config.sgd.momentum);
    compare("--weight-decay", saved.sgd->weight_decay, config.sgd.weight_decay);
  }
  if (saved.shards != config.shards) {
    changes.push_back("--resume " + file + ": the checkpoint was trained in the order of " +
                      std::to_string(saved.shards) + " shards (--shards), this run visits " +
                      std::to_string(config.shards) + "; the batches from here on differ");
  }
  if (!saved.data.empty() && saved.data != train.source) {
    changes.push_back("--resume " + file + ": the checkpoint was trained on " + saved.data +
                      ", this run trains on " + train.source);
  }
  return changes;
}

void load_initial_weights(Model& model, TrainProgress& progress, const TrainConfig& config,
                          const RunOptions& options) {
  init_params(model.params, config.model, config.seed);
  if (options.init) {
    Model from_file(config.model);
    load_checkpoint(*options.init, from_file);
    model.params = from_file.params;
  }
  if (options.resume) {
    progress = load_checkpoint(*options.resume, model);
    if (progress.seed != config.seed || progress.batch != config.batch) {
      fail("--resume " + options.resume->string() + ": the checkpoint was trained with --seed " +
           std::to_string(progress.seed) + " --batch " + std::to_string(progress.batch) +
           "; pass the same values to continue the run exactly");
    }
  }
}

bool hook_is_due(const RunOptions& options, std::int64_t global_step, std::int64_t total_steps) {
  if (options.every_steps <= 0 || !options.on_every_steps) return false;
  return global_step % options.every_steps == 0 || global_step == total_steps;
}

// Steps per epoch of the (sharded) order, after checking that the set fills one batch.
std::int64_t steps_per_epoch_of(const TrainConfig& config, const Dataset& train) {
  const std::size_t total = train.set_size();
  if (config.shards == 1) {
    const std::int64_t steps = static_cast<std::int64_t>(total) / config.batch;
    if (steps == 0) {
      fail_usage("the training set (" + std::to_string(total) + " samples from " + train.source +
                 ") is smaller than one batch of " + std::to_string(config.batch));
    }
    return steps;
  }
  const std::string flag = "--shards " + std::to_string(config.shards);
  if (config.shards < 1) fail(flag + ": the number of shards must be at least 1");
  if (config.shards > config.batch) {
    fail(flag + ": more shards than the batch of " + std::to_string(config.batch) +
         " samples (each shard gives every batch at least one sample)");
  }
  for (int r = 0; r < config.shards; ++r) {
    const DataBlock block = data_block(total, config.shards, r);
    const std::size_t share = data_block(static_cast<std::size_t>(config.batch), config.shards, r).count;
    if (block.count < share) {
      fail(flag + ": block " + std::to_string(r) + " holds " + std::to_string(block.count) +
           " of the " + std::to_string(total) + " samples of " + train.source +
           ", fewer than its share of " + std::to_string(share) + " in each batch of " +
           std::to_string(config.batch));
    }
  }
  return sharded_steps_per_epoch(total, config.shards, config.batch);
}

// Every process's block of the training set and peak memory, in rank order (collective).
std::vector<ProcessRecord> gather_process_records(Strategy& strategy, const Dataset& train) {
  const nlohmann::json mine = {{"first", train.first},
                               {"count", train.count},
                               {"source", train.block_source},
                               {"peak_rss_bytes", peak_rss_bytes()}};
  std::vector<ProcessRecord> records;
  for (const std::string& text : strategy.gather_texts(mine.dump())) {
    const nlohmann::json record = nlohmann::json::parse(text);
    records.push_back({static_cast<int>(records.size()), record.at("first").get<std::size_t>(),
                       record.at("count").get<std::size_t>(),
                       record.at("source").get<std::string>(),
                       record.at("peak_rss_bytes").get<std::uint64_t>()});
  }
  return records;
}

// The checkpoint of the last step is the one written at the end.
bool checkpoint_is_due(const RunOptions& options, std::int64_t global_step,
                       std::int64_t total_steps) {
  if (options.checkpoint_every <= 0 || !options.save) return false;
  return global_step % options.checkpoint_every == 0 && global_step < total_steps;
}

// Steps from `step` to the next multiple of `every` (every 0: no limit).
std::int64_t steps_to_multiple(std::int64_t step, std::int64_t every) {
  return every > 0 ? every - step % every : std::numeric_limits<std::int64_t>::max();
}

}  // namespace

std::string divergence_text(std::int64_t step, double loss) {
  const std::string value = std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf";
  return "diverged at step " + std::to_string(step) + " (loss " + value + "); try a smaller --lr";
}

EvalResult evaluate(ModelKind kind, const float* params, const Dataset& data, int batch) {
  EvalResult result;
  result.count = data.count;
  if (data.count == 0) return result;
  Workspace ws(kind, batch);
  aligned_vector<float> x(static_cast<std::size_t>(batch) * data.image_size());
  std::vector<std::uint8_t> y(static_cast<std::size_t>(batch));
  std::vector<float> logits(static_cast<std::size_t>(batch) * 10);
  std::vector<std::uint32_t> indices(static_cast<std::size_t>(batch));
  double loss = 0;
  std::size_t correct = 0;
  for (std::size_t start = 0; start < data.count; start += static_cast<std::size_t>(batch)) {
    const int n = static_cast<int>(std::min<std::size_t>(batch, data.count - start));
    for (int i = 0; i < n; ++i) indices[i] = static_cast<std::uint32_t>(data.first + start + i);
    gather_batch(x.data(), y.data(), data, indices.data(), n);
    forward_logits(kind, params, x.data(), n, logits.data(), ws);
    int c = 0;
    loss += softmax_xent_loss(logits.data(), y.data(), n, 10, &c);
    correct += static_cast<std::size_t>(c);
  }
  result.loss = loss / static_cast<double>(data.count);
  result.accuracy = static_cast<double>(correct) / static_cast<double>(data.count);
  return result;
}

RunResult run_training(const TrainConfig& config, const Dataset& train, const RunOptions& options) {
  CNNBENCH_CHECK(config.batch > 0, "--batch must be positive");
  const std::int64_t steps_per_epoch = steps_per_epoch_of(config, train);
  const std::int64_t total_steps =
      config.steps >= 0 ? config.steps : config.epochs * steps_per_epoch;

  std::unique_ptr<Strategy> strategy = make_strategy(config.strategy);
  RunResult result(config.model);
  result.total_steps = total_steps;
  TrainProgress& progress = result.progress;
  load_initial_weights(result.model, progress, config, options);
  const std::vector<std::string> changes =
      options.resume ? resume_changes(progress, config, train, options.resume->string())
                     : std::vector<std::string>{};
  progress.seed = config.seed;
  progress.batch = config.batch;
  progress.steps_per_epoch = steps_per_epoch;
  progress.shards = config.shards;
  progress.sgd = config.sgd;
  progress.data = train.source;
  // A resume with no step left would report a loss of 0 and a speed of nothing: a range error, as
  // --steps 0 is in the CLI (a run of zero steps without --resume only writes its initial weights).
  const std::string length = config.steps >= 0 ? "--steps " + std::to_string(config.steps)
                                               : "--epochs " + std::to_string(config.epochs);
  if (options.resume && progress.global_step >= total_steps) {
    fail_usage("--resume " + options.resume->string() + ": the checkpoint is already at step " +
               std::to_string(progress.global_step) + " and " + length + " asks for " +
               std::to_string(total_steps) + " in all: nothing left to train (pass a larger " +
               (config.steps >= 0 ? "--steps" : "--epochs") + ")");
  }

  const JobNotesScope job_notes(options.stop_requested);
  if (options.resume) note_checkpoint(options.resume->string(), progress.global_step);
  strategy->prepare(result.model, train, config);
  if (options.trace_steps > 0) strategy->keep_trace(options.trace_steps);
  const bool primary = strategy->is_primary();
  for (const std::string& change : changes) {
    if (primary) std::fprintf(stderr, "cnnbench: warning: %s\n", change.c_str());
  }
  ProgressReporter bar(primary ? options.progress : ProgressMode::none, total_steps, config.batch);
  const std::int64_t range_cap = std::clamp<std::int64_t>(max_images_per_range / config.batch, 1,
                                                          max_steps_per_range);

  std::int64_t cached_epoch = -1;
  std::vector<std::uint32_t> order;
  EpochRecord epoch_record;
  double epoch_loss_sum = 0;
  while (progress.global_step < total_steps) {
    if (strategy->agree_to_stop(options.stop_requested && options.stop_requested())) {
      result.interrupted = true;
      break;
    }
    const std::int64_t epoch = progress.global_step / steps_per_epoch;
    const std::int64_t first = progress.global_step % steps_per_epoch;
    if (epoch != cached_epoch) {
      order = sharded_epoch_order(train.set_size(), config.shards, config.batch, config.seed,
                                  epoch, config.shuffle);
      cached_epoch = epoch;
      epoch_record = EpochRecord{};
      epoch_record.epoch = epoch;
      epoch_loss_sum = 0;
    }
    std::int64_t count = std::min({steps_per_epoch - first, total_steps - progress.global_step,
                                   range_cap});
    count = std::min({count, steps_to_multiple(progress.global_step, options.every_steps),
                      steps_to_multiple(progress.global_step, options.checkpoint_every)});
    const StepRange range{order.data(), first, count, progress.global_step};
    const double start = now_seconds();
    strategy->run_steps(range, [&](std::int64_t i, double loss) {
      // Every rank sees the same (summed) loss, so every rank stops after the same range.
      if (!std::isfinite(loss) && !result.diverged_at_step) {
        result.diverged_at_step = range.global_first + i + 1;
        result.diverged_loss = loss;
      }
      result.step_losses.push_back(loss);
      epoch_loss_sum += loss;
      bar.update(range.global_first + i + 1, loss, result.steps_run + i + 1);
    });
    const double seconds = now_seconds() - start;
    result.train_seconds += seconds;
    result.steps_run += count;
    progress.global_step += count;
    epoch_record.steps += count;
    epoch_record.seconds += seconds;
    epoch_record.mean_loss = epoch_loss_sum / static_cast<double>(epoch_record.steps);
    if (first + count == steps_per_epoch || progress.global_step == total_steps) {
      result.epochs.push_back(epoch_record);
      epoch_record.steps = 0;
    }
    if (result.diverged_at_step) break;
    const bool hook_due = hook_is_due(options, progress.global_step, total_steps);
    const bool checkpoint_due = checkpoint_is_due(options, progress.global_step, total_steps);
    if (hook_due || checkpoint_due) strategy->sync_to(result.model);
    if (checkpoint_due && primary) save_checkpoint(*options.save, result.model, progress);
    if (checkpoint_due) note_checkpoint(options.save->string(), progress.global_step);
    if (hook_due && options.on_every_steps(progress.global_step, result.model)) break;
  }
  if (epoch_record.steps > 0) result.epochs.push_back(epoch_record);  // stopped inside an epoch
  if (!result.step_losses.empty()) result.last_step_loss = result.step_losses.back();
  if (!result.epochs.empty()) result.epoch_mean_loss = result.epochs.back().mean_loss;

  strategy->sync_to(result.model);
  result.processes = gather_process_records(*strategy, train);
  if (result.train_seconds > 0) {
    result.images_per_s =
        static_cast<double>(result.steps_run) * config.batch / result.train_seconds;
  }
  // An interrupted run always leaves a checkpoint, so that --resume loses nothing; a diverged one
  // none, since its weights are not finite.
  if (options.save && !result.diverged_at_step) {
    result.saved = options.save;
  } else if (result.interrupted) {
    result.saved = unused_path(options.interrupt_folder /
                               ("cnnbench-interrupted-step-" + std::to_string(progress.global_step) +
                                ".safetensors"));
  }
  if (result.saved && primary) {
    try {
      save_checkpoint(*result.saved, result.model, progress);
    } catch (const Error& e) {
      if (!options.save_error_in_result) throw;
      result.save_error = e.what();
    }
  }
  if (options.test) {
    result.test = evaluate(config.model, result.model.params.data(), *options.test);
  }
  result.strategy_metrics = strategy->metrics();
  result.time_breakdown = strategy->time_breakdown();
  if (options.trace_steps > 0) {
    result.trace = strategy->trace();
    keep_last_whole_steps(result.trace.tracks, options.trace_steps);
  }
  result.pins = strategy->pin_map();
  result.primary = primary;
  return result;
}

}  // namespace cnnbench
