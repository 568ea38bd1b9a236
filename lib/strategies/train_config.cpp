// TrainConfig at the edges: as JSON (the run report's config, a time-to-accuracy job) and as the
// `cnnbench train` arguments that rebuild it (a sweep's launched points).

#include "cnnbench/checkpoint.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

void to_json(nlohmann::json& out, const TrainConfig& config) {
  out = {{"model", model_name(config.model)},
         {"strategy", config.strategy},
         {"batch", config.batch},
         {"lr", float_setting(config.sgd.lr)},
         {"momentum", float_setting(config.sgd.momentum)},
         {"weight_decay", float_setting(config.sgd.weight_decay)},
         {"seed", config.seed},
         {"shuffle", config.shuffle},
         {"steps", config.steps},
         {"epochs", config.steps >= 0 ? nlohmann::json(nullptr) : nlohmann::json(config.epochs)},
         {"threads", config.threads},
         {"pin", config.pin},
         {"shards", config.shards},
         {"shard_data", config.shard_data},
         {"options", config.options}};
}

void from_json(const nlohmann::json& in, TrainConfig& config) {
  config.model = parse_model(in.at("model").get<std::string>());
  config.strategy = in.at("strategy").get<std::string>();
  config.batch = in.at("batch").get<int>();
  config.sgd.lr = in.at("lr").get<float>();
  config.sgd.momentum = in.at("momentum").get<float>();
  config.sgd.weight_decay = in.at("weight_decay").get<float>();
  config.seed = in.at("seed").get<std::uint64_t>();
  config.shuffle = in.at("shuffle").get<bool>();
  config.steps = in.at("steps").get<std::int64_t>();
  const nlohmann::json& epochs = in.at("epochs");
  if (!epochs.is_null()) config.epochs = epochs.get<std::int64_t>();
  config.threads = in.at("threads").get<int>();
  config.pin = in.at("pin").get<bool>();
  config.shards = in.value("shards", 1);
  config.shard_data = in.value("shard_data", false);
  config.options = in.at("options").get<std::map<std::string, std::string>>();
}

std::vector<std::string> to_argv(const TrainConfig& config) {
  std::vector<std::string> args = {"--model", model_name(config.model),
                                   "--strategy", config.strategy,
                                   "--threads", std::to_string(config.threads),
                                   "--batch", std::to_string(config.batch),
                                   "--lr", float_text(config.sgd.lr),
                                   "--momentum", float_text(config.sgd.momentum),
                                   "--weight-decay", float_text(config.sgd.weight_decay),
                                   "--seed", std::to_string(config.seed)};
  if (config.steps >= 0) {
    args.insert(args.end(), {"--steps", std::to_string(config.steps)});
  } else {
    args.insert(args.end(), {"--epochs", std::to_string(config.epochs)});
  }
  if (!config.shuffle) args.push_back("--no-shuffle");
  if (!config.pin) args.push_back("--no-pin");
  if (config.shards != 1 && !config.shard_data) {
    args.insert(args.end(), {"--shards", std::to_string(config.shards)});
  }
  if (config.shard_data) args.push_back("--shard-data");
  for (const auto& [name, value] : config.options) {
    const OptionSpec* spec = find_option_spec(name);
    CNNBENCH_CHECK(spec != nullptr, "no strategy has an option --" + name);
    args.insert(args.end(), {spec->flag(), value});
  }
  return args;
}

}  // namespace cnnbench
