// The PyTorch peers: whether they can run here, the files their worker reads, its command line.
#include "peer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "cnnbench/checkpoint.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/topology.hpp"
#include "subprocess.hpp"

namespace cnnbench {

namespace {

// $CNNBENCH_PEER_SCRIPT, else bench/torch_peer.py in a folder above the binary (a build tree
// inside the source tree, as plot finds plots/plot_report.py); empty when neither exists.
std::filesystem::path find_peer_script() {
  if (const char* env = std::getenv("CNNBENCH_PEER_SCRIPT"); env != nullptr && *env != 0) return env;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
  for (auto dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    const auto candidate = dir / "bench" / "torch_peer.py";
    if (std::filesystem::exists(candidate)) return candidate;
    if (dir == dir.root_path()) break;
  }
  return {};
}

// An IDX file of unsigned bytes, as MNIST's are: magic 0x00000803 (or 01), big-endian sizes.
void write_idx(const std::filesystem::path& file, const std::vector<std::uint32_t>& dims,
               const std::uint8_t* bytes, std::size_t count) {
  std::ofstream out(file, std::ios::binary);
  const char magic[4] = {0, 0, 8, static_cast<char>(dims.size())};
  out.write(magic, 4);
  for (std::uint32_t d : dims) {
    const char big_endian[4] = {static_cast<char>(d >> 24), static_cast<char>(d >> 16),
                                static_cast<char>(d >> 8), static_cast<char>(d)};
    out.write(big_endian, 4);
  }
  out.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(count));
  CNNBENCH_CHECK(out.good(), "cannot write " + file.string());
}

void write_split(const std::filesystem::path& folder, const std::string& split, const Dataset& data) {
  const auto count = static_cast<std::uint32_t>(data.count);
  write_idx(folder / (split + "-images-idx3-ubyte"),
            {count, static_cast<std::uint32_t>(data.rows), static_cast<std::uint32_t>(data.cols)},
            data.images.data(), data.images.size());
  write_idx(folder / (split + "-labels-idx1-ubyte"), {count}, data.labels.data(), data.labels.size());
}

// The OS CPUs of the point's logical cores 0..p-1, the ones our strategies pin their workers to;
// "" when the sweep does not pin.
std::string cpu_list(const SweepOptions& options, const PointSpec& point) {
  if (!options.pin) return "";
  const Topology& topology = machine_topology();
  std::string cpus;
  for (int core = 0; core < point.total_cores(); ++core) {
    const auto& pus = topology.core_pus[static_cast<std::size_t>(core % topology.cores)];
    cpus += (cpus.empty() ? "" : ",") + std::to_string(pus.front());
  }
  return cpus;
}

// Untimed steps each throughput repetition of the worker trains first and then undoes (a fresh
// interpreter's first steps build oneDNN's primitives and grow the allocator's caches, some 10x a
// later step): the warm process our in-process points run in, as a plain loop's warm-up is.
constexpr int peer_warmup_steps = 10;

}  // namespace

const std::vector<std::string>& peer_strategy_names() {
  static const std::vector<std::string> names = {"pytorch", "pytorch-ddp"};
  return names;
}

bool is_peer_strategy(const std::string& strategy) {
  const auto& names = peer_strategy_names();
  return std::find(names.begin(), names.end(), strategy) != names.end();
}

StrategyInfo peer_strategy_info(const std::string& strategy, const std::string& python,
                                const std::filesystem::path& scratch) {
  StrategyInfo info;
  info.name = strategy;
  info.description = strategy == "pytorch"
                         ? "peer: PyTorch in one process, cores threads"
                         : "peer: PyTorch DistributedDataParallel, nodes processes over gloo on 127.0.0.1";
  if (find_peer_script().empty()) {
    info.reason = "bench/torch_peer.py not found above this binary (set CNNBENCH_PEER_SCRIPT)";
    return info;
  }
  const std::filesystem::path log = scratch / "torch-check.log";
  const std::string check = "import torch, torch.distributed as d; assert d.is_available() and "
                            "d.is_gloo_available(), 'torch.distributed without gloo'";
  int code = 1;
  try {
    code = run_logged({python, "-c", check}, log, {});
  } catch (const Error& e) {
    info.reason = std::string(e.what()) + "; install python3-torch (apt-get install python3-torch) "
                  "or pass --python";
    return info;
  }
  if (code != 0) {
    info.reason = "python3-torch is not importable by " + python + " (" + last_line(log) +
                  "); install it (apt-get install python3-torch) or pass --python";
    return info;
  }
  info.available = true;
  return info;
}

PeerFiles::PeerFiles(const SweepOptions& options, const Dataset& train, std::filesystem::path folder)
    : options_(options), train_(train), folder_(std::move(folder)) {
  std::filesystem::create_directories(folder_);
  write_split(folder_, "train", train_);
  if (options_.target_accuracy) {
    write_split(folder_, "t10k",
                accuracy_test_set(options_.data_dir, options_.synthetic_samples, options_.seed));
  }
}

std::filesystem::path PeerFiles::init(ModelKind model) {
  const std::filesystem::path file = folder_ / (std::string(model_name(model)) + "-init.safetensors");
  bool& written = inits_[model == ModelKind::fc3 ? 0 : 1];
  if (!written) {
    Model initial(model);
    init_params(initial.params, model, options_.seed);  // as run_training starts every run
    save_checkpoint(file, initial, TrainProgress{});
    written = true;
  }
  return file;
}

// Step k's samples are the ones run_training's step k takes: its epoch's order (sharded as the
// sweep shards), batch by batch.
std::filesystem::path PeerFiles::order(std::int64_t steps) {
  const std::filesystem::path file = folder_ / "order.u32";
  if (steps <= order_steps_) return file;
  const std::size_t batch = static_cast<std::size_t>(options_.batch);
  const std::int64_t per_epoch = sharded_steps_per_epoch(train_.set_size(), options_.shards, options_.batch);
  std::vector<std::uint32_t> samples;
  samples.reserve(static_cast<std::size_t>(steps) * batch);
  std::vector<std::uint32_t> epoch_samples;
  for (std::int64_t k = 0; k < steps; ++k) {
    if (k % per_epoch == 0) {
      epoch_samples = sharded_epoch_order(train_.set_size(), options_.shards, options_.batch,
                                          options_.seed, k / per_epoch, true);
    }
    const auto first = epoch_samples.begin() + static_cast<std::ptrdiff_t>((k % per_epoch) * options_.batch);
    samples.insert(samples.end(), first, first + options_.batch);
  }
  // Little-endian, as the worker reads it (the machines cnnbench runs on are).
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(samples.data()),
            static_cast<std::streamsize>(samples.size() * sizeof(std::uint32_t)));
  CNNBENCH_CHECK(out.good(), "cannot write " + file.string());
  order_steps_ = steps;
  return file;
}

std::vector<std::string> peer_command(const SweepOptions& options, PeerFiles& files,
                                      const PointSpec& point, std::int64_t steps,
                                      double target_accuracy) {
  std::vector<std::string> args = {options.python, find_peer_script().string(),
                                   "--model", model_name(point.model),
                                   "--data", files.data().string(),
                                   "--init", files.init(point.model).string(),
                                   "--order", files.order(steps).string(),
                                   "--batch", std::to_string(options.batch),
                                   "--lr", float_text(options.lr),
                                   "--momentum", float_text(options.momentum),
                                   "--steps", std::to_string(steps),
                                   "--threads", std::to_string(point.cores),
                                   "--ranks", std::to_string(point.nodes)};
  if (point.strategy == "pytorch-ddp") args.push_back("--ddp");
  const std::string cpus = cpu_list(options, point);
  if (!cpus.empty()) args.insert(args.end(), {"--cpus", cpus});
  if (target_accuracy <= 0) {
    args.insert(args.end(), {"--warmup-steps", std::to_string(peer_warmup_steps)});
  } else {
    char target[32];
    std::snprintf(target, sizeof target, "%.17g", target_accuracy);
    args.insert(args.end(), {"--target-accuracy", target, "--eval-every", std::to_string(options.eval_every)});
  }
  return args;
}

}  // namespace cnnbench
