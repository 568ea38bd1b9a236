// `cnnbench scaling-model`: the step time of --strategy cluster predicted from the allreduce cost
// model (cnnbench/collective_model.hpp) for every fabric profile, strong and weak scaling, with
// the algorithm switch points and the node count where efficiency falls below 50%; and, given
// measured cluster runs, the prediction of each against its measured step.
#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cnnbench/cluster.hpp"
#include "cnnbench/cluster_prediction.hpp"
#include "cnnbench/collective_model.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/link_simulation.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/report.hpp"
#include "commands.hpp"
#include "input_rules.hpp"

namespace cnnbench::cli {

namespace {

struct ScalingArgs {
  std::string fabric;
  std::vector<std::string> allreduce;  // allreduce-bench reports, each a measured profile
  bool protocol_fit = false;           // and one profile fitted to all of them jointly
  std::string exchange;                // allreduce-bench --exchange report: their exchange curve
  std::string model = "lenet5";
  double serial_step_s = 0;
  double hidden_fraction = 0;
  bool overlap = true;
  int ranks_per_node = 1;
  int max_nodes = 1024;
  std::vector<std::string> runs;  // measured cluster run reports to check
  std::vector<std::string> allreduce_checks;  // allreduce-bench reports to simulate size by size
  std::string profile;            // the profile the runs are checked against
  std::string uncapped;           // the same link without its tbf cap, for runs with a link rate
  std::string report = "-";
  bool force = false;
};

struct Profile {
  std::string name, kind, source;
  CollectiveCost network;
  std::optional<CollectiveCost> shared_memory;
  int exchange_ranks = 0;  // the ranks network.exchange was measured on, when it was
  std::string fabric;      // transport and link rate of the reports it comes from, if any
};

double number_at(const nlohmann::json& object, const char* key, const std::string& where) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_number() ||
      !std::isfinite(object.at(key).get<double>()) || object.at(key).get<double>() < 0) {
    fail(where + ": '" + key + "' must be a number >= 0");
  }
  return object.at(key).get<double>();
}

CollectiveCost cost_at(const nlohmann::json& object, const std::string& where) {
  return {{number_at(object, "alpha_s", where), number_at(object, "beta_s_per_byte", where)},
          number_at(object, "gamma_s_per_byte", where)};
}

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path + ": not valid JSON (" + e.what() + ")");
  }
}

// A measured exchange curve: {"ranks", "sizes": [{"bytes", "seconds"}, ...]}, as a fabric profile
// holds it and an allreduce-bench --exchange report's own fields.
ExchangeCurve exchange_curve_at(const nlohmann::json& object, const std::string& where) {
  if (!object.is_object() || !object.contains("sizes") || !object.at("sizes").is_array()) {
    fail(where + ": expected an object with a \"sizes\" array");
  }
  std::vector<SizeTime> points;
  for (std::size_t i = 0; i < object.at("sizes").size(); ++i) {
    const std::string at = where + ".sizes[" + std::to_string(i) + "]";
    points.push_back({number_at(object.at("sizes")[i], "bytes", at), number_at(object.at("sizes")[i], "seconds", at)});
  }
  try {
    return ExchangeCurve(points);
  } catch (const Error& e) {
    fail(where + ": " + e.what());
  }
}

nlohmann::json exchange_json(const ExchangeCurve& curve, int ranks) {
  nlohmann::json sizes = nlohmann::json::array();
  for (const SizeTime& p : curve.points()) sizes.push_back({{"bytes", p.bytes}, {"seconds", p.seconds}});
  return {{"ranks", ranks}, {"sizes", sizes}};
}

// {"profiles": [{"name", "kind", "source", "network": {alpha_s, beta_s_per_byte,
// gamma_s_per_byte}, "shared_memory": {...} (optional), "exchange": {"ranks", "sizes": [{"bytes",
// "seconds"}, ...]} (optional: the measured exchange curve)}, ...]}
std::vector<Profile> read_fabric_profiles(const std::string& path) {
  const nlohmann::json root = read_json(path);
  if (!root.is_object() || !root.contains("profiles") || !root.at("profiles").is_array()) {
    fail(path + ": expected an object with a \"profiles\" array");
  }
  std::vector<Profile> profiles;
  for (std::size_t i = 0; i < root.at("profiles").size(); ++i) {
    const nlohmann::json& p = root.at("profiles")[i];
    const std::string where = path + ": profiles[" + std::to_string(i) + "]";
    if (!p.is_object() || !p.contains("name") || !p.at("name").is_string()) fail(where + ": needs a \"name\"");
    Profile profile{p.at("name"), p.value("kind", ""), p.value("source", ""),
                    cost_at(p.value("network", nlohmann::json()), where + ".network"), std::nullopt, 0, ""};
    if (p.contains("rendezvous")) {
      const nlohmann::json& rendezvous = p.at("rendezvous");
      profile.network.rendezvous = LinkCost{number_at(rendezvous, "alpha_s", where + ".rendezvous"),
                                            number_at(rendezvous, "beta_s_per_byte", where + ".rendezvous")};
      profile.network.eager_limit_bytes = number_at(p, "eager_limit_bytes", where);
    }
    if (p.contains("shared_memory")) profile.shared_memory = cost_at(p.at("shared_memory"), where + ".shared_memory");
    if (p.contains("exchange")) {
      profile.network.exchange = exchange_curve_at(p.at("exchange"), where + ".exchange");
      profile.exchange_ranks = p.at("exchange").value("ranks", 0);
    }
    profiles.push_back(profile);
  }
  return profiles;
}

// "tcp 1gbit", "shm uncapped": where an allreduce-bench report was measured.
std::string fabric_label(const nlohmann::json& network) {
  return network.at("transport").get<std::string>() + " " +
         (network.at("link_rate").is_string() ? network.at("link_rate").get<std::string>() : "uncapped");
}

// An allreduce-bench report as a profile: the link cost its fit inverts to.
Profile profile_from_allreduce(const std::string& path) {
  const nlohmann::json bench = read_json(path);
  if (bench.value("exchange", false)) fail(path + ": an exchange report (allreduce-bench --exchange): pass it with --exchange");
  if (!bench.contains("fit") || !bench.at("fit").is_object() || !bench.at("fit").contains("link")) {
    fail(path + ": not an allreduce-bench report with a fit over more than one rank" +
         (bench.contains("fit_refused") ? " (" + bench.at("fit_refused").get<std::string>() + ")" : std::string()));
  }
  const std::string fabric = fabric_label(bench.at("network"));
  return {path,
          "measured",
          "allreduce-bench, " + std::to_string(bench.at("ranks").get<int>()) + " ranks, " + fabric,
          cost_at(bench.at("fit").at("link"), path + ": fit.link"),
          std::nullopt,
          0,
          fabric};
}

// An allreduce-bench --exchange report's medians as the exchange curve of the --allreduce
// profiles, which must come from the same fabric.
void add_exchange_curve(const std::string& path, std::span<Profile> measured) {
  const nlohmann::json bench = read_json(path);
  if (!bench.value("exchange", false)) fail("--exchange " + path + ": not an allreduce-bench --exchange report");
  const ExchangeCurve curve = exchange_curve_at(bench, "--exchange " + path);
  const std::string fabric = fabric_label(bench.at("network"));
  for (Profile& profile : measured) {
    if (profile.fabric != fabric) {
      fail("--exchange " + path + " was measured over " + fabric + ", the profile " + profile.name + " over " +
           profile.fabric);
    }
    profile.network.exchange = curve;
    profile.exchange_ranks = bench.at("ranks");
  }
}

// One profile fitted jointly to every size of the reports (fit_protocol): the algorithm each size
// ran, eager and rendezvous messages apart. The reports must come from one fabric (transport and
// link rate).
Profile protocol_profile(const std::vector<std::string>& paths) {
  std::vector<AlgorithmTime> times;
  double gamma = 0;
  std::string fabric;
  for (const std::string& path : paths) {
    const nlohmann::json bench = read_json(path);
    const std::string here = fabric_label(bench.at("network"));
    if (!fabric.empty() && here != fabric) {
      fail("--protocol-fit: " + path + " was measured over " + here + ", the reports before it over " + fabric);
    }
    fabric = here;
    // Every size, those inside a tbf burst too: a size's calls run back to back, and whether they
    // outrun the bucket is part of what the fit describes, as it is of the times it predicts.
    for (const nlohmann::json& size : bench.at("sizes")) {
      const double bytes = size.at("bytes");
      times.push_back({parse_allreduce_algorithm(size.at("algorithm_run").get<std::string>()), bench.at("ranks"),
                       bytes, size.at("seconds")});
    }
    gamma += bench.at("reduction").at("gamma_s_per_byte").get<double>() / double(paths.size());
  }
  const ProtocolFit fit = fit_protocol(times, gamma);
  std::string names;
  for (const std::string& path : paths) names += (names.empty() ? "" : ", ") + path;
  return {"protocol fit of " + names, "measured",
          "fit_protocol over " + std::to_string(times.size()) + " allreduces, " + fabric +
              ", RMS relative residual " + std::to_string(fit.rms_relative_residual),
          fit.cost, std::nullopt, 0, fabric};
}

HierarchicalFabric fabric_of(const Profile& profile, int nodes, int ranks_per_node) {
  HierarchicalFabric fabric;
  fabric.nodes = nodes;
  fabric.ranks_per_node = ranks_per_node;
  fabric.network = profile.network;
  fabric.shared_memory = profile.shared_memory.value_or(profile.network);
  return fabric;
}

nlohmann::json prediction_json(const StepPrediction& p) {
  return {{"nodes", p.nodes},           {"step_s", p.step_s},         {"compute_s", p.compute_s},
          {"communication_s", p.communication_s}, {"exposed_s", p.exposed_s}, {"efficiency", p.efficiency},
          {"algorithm", p.algorithm}};
}

// 1, 2, 3, 4, 6, 8, 12, 16, ... up to max_nodes: even steps on a log axis.
std::vector<int> node_counts(int max_nodes) {
  std::vector<int> counts = {1};
  for (int n = 2; n <= max_nodes; n *= 2) {
    counts.push_back(n);
    if (n * 3 / 2 <= max_nodes && n >= 2) counts.push_back(n * 3 / 2);
  }
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

nlohmann::json profile_json(const Profile& profile, const StepModel& model, const ScalingArgs& a) {
  nlohmann::json out = {{"name", profile.name}, {"kind", profile.kind}, {"source", profile.source},
                        {"network", {{"alpha_s", profile.network.link.alpha_s},
                                     {"beta_s_per_byte", profile.network.link.beta_s_per_byte},
                                     {"gamma_s_per_byte", profile.network.gamma_s_per_byte}}}};
  if (profile.network.rendezvous) {
    out["rendezvous"] = {{"alpha_s", profile.network.rendezvous->alpha_s},
                         {"beta_s_per_byte", profile.network.rendezvous->beta_s_per_byte}};
    out["eager_limit_bytes"] = profile.network.eager_limit_bytes;
  }
  if (profile.network.exchange) out["exchange"] = exchange_json(*profile.network.exchange, profile.exchange_ranks);
  nlohmann::json crossovers = nlohmann::json::array();
  for (int ranks : node_counts(a.max_nodes)) {
    for (const Crossover& c : allreduce_crossovers(ranks, profile.network, 4, 1 << 30)) {
      crossovers.push_back({{"ranks", ranks}, {"bytes", c.bytes}, {"below", c.below}, {"above", c.above}});
    }
  }
  out["crossovers"] = crossovers;
  // Each algorithm's cost at a few sizes, to hold against allreduce-bench --algorithm runs.
  nlohmann::json table = nlohmann::json::array();
  for (int ranks : {2, 4, 8}) {
    for (double bytes : {65536.0, 1048576.0}) {
      nlohmann::json row = {{"ranks", ranks}, {"bytes", bytes}};
      for (AllreduceAlgorithm algorithm : {AllreduceAlgorithm::ring, AllreduceAlgorithm::recursive_doubling,
                                           AllreduceAlgorithm::rabenseifner}) {
        row[std::string(algorithm_name(algorithm))] = allreduce_seconds(algorithm, ranks, bytes, profile.network);
      }
      row["cheapest"] = cheapest_allreduce(ranks, bytes, profile.network).algorithm;
      if (a.ranks_per_node > 1) {
        // `ranks` nodes of ranks_per_node each: flat over all of them, or hierarchical.
        const HierarchicalFabric fabric = fabric_of(profile, ranks, a.ranks_per_node);
        const AllreduceChoice flat = cheapest_allreduce(ranks * a.ranks_per_node, bytes, profile.network);
        row["nodes_x_ranks_per_node"] = {{"flat", flat.algorithm},
                                         {"flat_s", flat.seconds},
                                         {"hierarchical_s", hierarchical_allreduce_seconds(fabric, bytes)},
                                         {"cheapest", cheapest_allreduce(fabric, bytes).algorithm}};
      }
      table.push_back(row);
    }
  }
  out["allreduce_seconds"] = table;
  for (const auto& [name, scaling] : {std::pair{"strong", Scaling::strong}, std::pair{"weak", Scaling::weak}}) {
    nlohmann::json curve = nlohmann::json::array();
    for (int nodes : node_counts(a.max_nodes)) {
      curve.push_back(prediction_json(predict_step(model, scaling, fabric_of(profile, nodes, a.ranks_per_node))));
    }
    out[name] = curve;
    const std::optional<int> half =
        nodes_below_half_efficiency(model, scaling, fabric_of(profile, 1, a.ranks_per_node), a.max_nodes);
    out[std::string(name) + "_efficiency_below_half_at"] = half ? nlohmann::json(*half) : nlohmann::json();
  }
  return out;
}

// A measured cluster run against the prediction for its node count: the step is
// metrics.train_seconds / steps, the hidden share its own overlap_detail.hidden_fraction.
nlohmann::json check_run(const std::string& path, const Profile& profile, const Profile* uncapped,
                         StepModel model, const ScalingArgs& a) {
  const nlohmann::json run = read_report(path);
  const nlohmann::json& metrics = run.at("metrics");
  if (run.at("config").at("strategy") != "cluster" || !run.contains("strategy_metrics")) {
    fail(path + ": not a report of a --strategy cluster run");
  }
  const nlohmann::json& cluster = run.at("strategy_metrics");
  const int nodes = cluster.at("ranks");
  const double measured = metrics.at("train_seconds").get<double>() / metrics.at("steps").get<double>();
  if (cluster.contains("overlap_detail")) model.hidden_fraction = cluster.at("overlap_detail").at("hidden_fraction");
  // Reports from before the schedule was reported: the same schedule from the model and overlap.
  const nlohmann::json& schedule = cluster.at("allreduce").value("schedule_bytes", nlohmann::json());
  model.bucket_bytes = schedule.is_array() && !schedule.empty()
                           ? schedule.get<std::vector<double>>()
                           : allreduce_schedule_bytes(parse_model(run.at("config").at("model").get<std::string>()),
                                                      cluster.at("overlap_active").get<bool>());
  HierarchicalFabric fabric = fabric_of(profile, nodes, a.ranks_per_node);
  // A tbf-capped link (emulated hosts): a step's traffic that fits the bucket is not held back.
  const nlohmann::json& rate = cluster.at("network").at("link_rate");
  const std::optional<double> bits_per_s = rate.is_string() ? parse_tc_rate(rate.get<std::string>()) : std::nullopt;
  if (uncapped != nullptr && bits_per_s) {
    fabric.token_bucket = TokenBucket{tbf_burst_bytes(*bits_per_s), *bits_per_s / 8};
    fabric.uncapped = uncapped->network;
  }
  model.rule = AllreduceRule::open_mpi_iallreduce_in_place;  // as the cluster strategy calls it
  model.iallreduce_asked = iallreduce_asked(cluster);
  const StepPrediction p = predict_step(model, Scaling::strong, fabric);
  return {{"run", path},
          {"prediction",
           {{"predicted_step_s", p.step_s},
            {"measured_step_s", measured},
            {"relative_error", (p.step_s - measured) / measured},
            {"algorithm", p.algorithm},
            {"algorithm_rule", rule_name(model.rule)},
            {"hidden_fraction", model.hidden_fraction},
            {"simulated", p.simulated},
            {"profile", profile.name}}}};
}

// An allreduce-bench report's medians against its calls simulated back to back (no compute
// between them) on `link`, shaped by the report's tbf rate when it has one.
nlohmann::json check_allreduce(const std::string& path, const CollectiveCost& link) {
  const nlohmann::json bench = read_json(path);
  StarNetwork star;
  star.hosts = bench.at("ranks");
  star.link = link;
  const nlohmann::json& rate = bench.at("network").at("link_rate");
  const std::optional<double> bits_per_s = rate.is_string() ? parse_tc_rate(rate.get<std::string>()) : std::nullopt;
  if (bits_per_s) star.shaping = ShapedLink{*bits_per_s / 8, tbf_burst_bytes(*bits_per_s)};
  nlohmann::json sizes = nlohmann::json::array();
  for (const auto& size : bench.at("sizes")) {
    const double bytes = size.at("bytes"), measured = size.at("seconds");
    const AllreduceAlgorithm algorithm = parse_allreduce_algorithm(size.at("algorithm_run").get<std::string>());
    const std::vector<std::pair<AllreduceAlgorithm, double>> one{{algorithm, bytes}};
    const double predicted = simulate_steps(star, 0.0, one).step_s;
    sizes.push_back({{"bytes", bytes},
                     {"algorithm", algorithm_name(algorithm)},
                     {"measured_s", measured},
                     {"predicted_s", predicted},
                     {"relative_error", (predicted - measured) / measured}});
  }
  return {{"report", path}, {"ranks", star.hosts}, {"link_rate", rate}, {"sizes", sizes}};
}

int run_scaling_model(const ScalingArgs& a) {
  // Every file it reads is an input: no spelling of --report replaces one of them.
  std::vector<InputPath> inputs = {{"--fabric", a.fabric}, {"--exchange", a.exchange}};
  for (const std::string& path : a.allreduce) inputs.push_back({"--allreduce", path});
  for (const std::string& path : a.runs) inputs.push_back({"--check-run", path});
  for (const std::string& path : a.allreduce_checks) inputs.push_back({"--check-allreduce", path});
  check_outputs({{.option = "--report", .path = a.report, .replace = a.force}}, inputs);
  std::vector<Profile> profiles;
  if (!a.fabric.empty()) profiles = read_fabric_profiles(a.fabric);
  const std::size_t first_measured = profiles.size();  // the --allreduce profiles and their fit
  for (const std::string& path : a.allreduce) {
    try {
      profiles.push_back(profile_from_allreduce(path));
    } catch (const nlohmann::json::exception& e) {
      fail(path + ": not an allreduce-bench report this cnnbench can read (" + e.what() + ")");
    }
  }
  if (a.protocol_fit) {
    if (a.allreduce.empty()) fail("--protocol-fit fits the --allreduce reports: pass at least one");
    try {
      profiles.push_back(protocol_profile(a.allreduce));
    } catch (const nlohmann::json::exception& e) {
      fail("--protocol-fit: an --allreduce report this cnnbench cannot read (" + std::string(e.what()) + ")");
    }
  }
  if (!a.exchange.empty()) {
    if (a.allreduce.empty()) fail("--exchange prices the pairwise rounds of the --allreduce profiles: pass at least one --allreduce");
    try {
      add_exchange_curve(a.exchange, std::span(profiles).subspan(first_measured));
    } catch (const nlohmann::json::exception& e) {
      fail("--exchange " + a.exchange + ": not an allreduce-bench report this cnnbench can read (" + e.what() + ")");
    }
  }
  if (profiles.empty()) fail("no fabric profile: pass --fabric FILE and/or --allreduce REPORT");
  StepModel model;
  model.serial_step_s = a.serial_step_s;
  model.hidden_fraction = a.hidden_fraction;
  model.bucket_bytes = allreduce_schedule_bytes(parse_model(a.model), a.overlap);
  nlohmann::json out = {{"model", a.model},
                        {"serial_step_s", a.serial_step_s},
                        {"hidden_fraction", a.hidden_fraction},
                        {"ranks_per_node", a.ranks_per_node},
                        {"bucket_bytes", model.bucket_bytes},
                        {"formula", "step = compute + (1 - hidden_fraction) x sum over buckets of the "
                                    "cheapest allreduce; compute = serial_step / nodes (strong) or "
                                    "serial_step (weak)"}};
  nlohmann::json profile_results = nlohmann::json::array();
  for (const Profile& profile : profiles) profile_results.push_back(profile_json(profile, model, a));
  out["profiles"] = profile_results;
  if (!a.runs.empty() || !a.allreduce_checks.empty()) {
    const Profile* chosen = &profiles.front();
    for (const Profile& profile : profiles) {
      if (profile.name == a.profile) chosen = &profile;
    }
    if (!a.profile.empty() && chosen->name != a.profile) fail("--profile " + a.profile + ": no such profile");
    const Profile* uncapped = nullptr;
    for (const Profile& profile : profiles) {
      if (profile.name == a.uncapped) uncapped = &profile;
    }
    if (!a.uncapped.empty() && uncapped == nullptr) fail("--uncapped " + a.uncapped + ": no such profile");
    nlohmann::json checks = nlohmann::json::array();
    for (const std::string& run : a.runs) {
      try {
        checks.push_back(check_run(run, *chosen, uncapped, model, a));
      } catch (const nlohmann::json::exception& e) {
        fail(run + ": not a cluster run report this cnnbench can read (" + e.what() + ")");
      }
    }
    out["checks"] = checks;
    nlohmann::json allreduce_checks = nlohmann::json::array();
    for (const std::string& bench : a.allreduce_checks) {
      try {
        allreduce_checks.push_back(check_allreduce(bench, (uncapped != nullptr ? uncapped : chosen)->network));
      } catch (const nlohmann::json::exception& e) {
        fail(bench + ": not an allreduce-bench report this cnnbench can read (" + e.what() + ")");
      }
    }
    out["allreduce_checks"] = allreduce_checks;
  }
  write_json(a.report, out);
  return 0;
}

}  // namespace

void add_scaling_model_command(CLI::App& root, Runner& runner) {
  auto args = std::make_shared<ScalingArgs>();
  CLI::App* cmd = root.add_subcommand(
      "scaling-model", "Predict --strategy cluster's step time over many nodes from allreduce cost models");
  cmd->add_option("--fabric", args->fabric, "fabric profiles (JSON, e.g. plots/fabric_profiles.json)")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_option("--allreduce", args->allreduce, "allreduce-bench reports, each added as a measured profile")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_flag("--protocol-fit", args->protocol_fit,
               "add one profile fitted to every size of the --allreduce reports at once (one fabric), "
               "messages above Open MPI's eager limit (64 KiB) with their own alpha and beta");
  cmd->add_option("--exchange", args->exchange,
                  "an allreduce-bench --exchange report of the same fabric as the --allreduce reports: "
                  "their profiles price recursive doubling's and Rabenseifner's pairwise rounds by its "
                  "measured curve instead of one message each")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_option("--model", args->model, "fc3 or lenet5 (its gradient buckets)")
      ->check(CLI::IsMember({"fc3", "lenet5"}))
      ->capture_default_str();
  cmd->add_option("--serial-step", args->serial_step_s, "one node's step time in seconds over the whole batch")
      ->check(CLI::PositiveNumber)
      ->required();
  cmd->add_option("--hidden-fraction", args->hidden_fraction,
                  "share of communication hidden behind backward (a report's overlap_detail.hidden_fraction)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--overlap", args->overlap, "bucketed allreduce during backward (on) or one sum after (off)")
      ->capture_default_str();
  cmd->add_option("--ranks-per-node", args->ranks_per_node, "ranks sharing a node's memory (hierarchical)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-nodes", args->max_nodes, "largest node count of the curves")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--check-run", args->runs, "measured cluster run reports to predict and compare")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_option("--check-allreduce", args->allreduce_checks,
                  "allreduce-bench reports whose calls to simulate back to back on the --uncapped "
                  "(else --profile) link, shaped by the report's link rate, size by size")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_option("--profile", args->profile, "the profile --check-run uses (default: the first)");
  cmd->add_option("--uncapped", args->uncapped,
                  "the profile of the same link without its rate cap: --check-run simulates a run over "
                  "a tbf-capped link (its network.link_rate) on it, with the rate's token bucket");
  cmd->add_option("--report", args->report, "where to write the JSON ('-' = stdout)")
      ->check(output_path_rule(OutputKind::json))
      ->capture_default_str();
  add_force_flag(cmd, args->force, "--report file");
  cmd->callback([args, &runner] { runner = [args] { return run_scaling_model(*args); }; });
}

}  // namespace cnnbench::cli
