// sweep --tuned: each tune's winner per strategy measured beside that strategy's default point, in
// the same rounds, so that the report shows what tuning buys on this machine (docs/tune.md).
#include <algorithm>
#include <set>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/sweep.hpp"

namespace cnnbench {

using nlohmann::json;

namespace {

// "over 2 emulated hosts at 1gbit", "" for a tune of one machine.
std::string hosts_text(int hosts, const std::string& rate) {
  if (hosts == 0) return "";
  return "over " + std::to_string(hosts) + " emulated hosts" + (rate.empty() ? "" : " at " + rate);
}

// The tune must have been made for what this sweep runs: one of its models, its batch, and the
// emulated hosts it runs over (a winner's settings hold for the batch and link it was measured at).
void check_tune_fits(const TunedSettings& t, const SweepOptions& o, const std::string& name) {
  const json& config = t.report.at("config");
  const ModelKind model = parse_model(config.at("model").get<std::string>());
  if (std::find(o.models.begin(), o.models.end(), model) == o.models.end()) {
    fail(name + ": a tune of " + model_name(model) + ", which --model does not include");
  }
  const int batch = config.at("batch").get<int>();
  if (batch != o.batch) {
    fail(name + ": tuned at --batch " + std::to_string(batch) + " but the sweep runs --batch " +
         std::to_string(o.batch) + " (a winner's settings hold for the batch they were measured at)");
  }
  const json& network = config.value("network", json());
  const int hosts = network.is_object() ? network.value("emulated_hosts", 0) : 0;
  const json& rate_value = network.is_object() ? network.value("rate", json()) : json();
  const std::string rate = rate_value.is_string() ? rate_value.get<std::string>() : "";
  if (hosts > 0 && (hosts != o.emulated_hosts || rate != o.link_rate)) {
    fail(name + ": tuned " + hosts_text(hosts, rate) + "; run the sweep " + hosts_text(hosts, rate) +
         " too (--emulate-hosts " + std::to_string(hosts) + (rate.empty() ? "" : " --rate " + rate) + ")");
  }
}

}  // namespace

void add_tuned_points(std::vector<PointSpec>& plan, const SweepOptions& o) {
  std::set<std::string> tuned_for;  // model, cores and nodes of every tune so far
  for (const TunedSettings& t : o.tuned) {
    const std::string name = "--tuned " + t.file.string();
    check_tune_fits(t, o, name);
    const json& config = t.report.at("config");
    const ModelKind model = parse_model(config.at("model").get<std::string>());
    const int cores = config.at("cores").get<int>(), nodes = config.at("nodes").get<int>();
    const std::string what = std::string(model_name(model)) + " on " + std::to_string(cores) + " core" +
                             (cores == 1 ? "" : "s") + (nodes > 1 ? " x " + std::to_string(nodes) + " nodes" : "");
    if (!tuned_for.insert(what).second) fail(name + ": a second tune of " + what + " (give one per model, cores and nodes)");
    for (const auto& item : t.report.at("winners").items()) {
      const std::string strategy = item.key();
      const json& winner = item.value();
      if (winner.is_null()) continue;  // the tune measured none of its candidates
      const bool runs_strategy = std::any_of(plan.begin(), plan.end(), [&](const PointSpec& p) {
        return p.model == model && p.strategy == strategy;
      });
      if (!runs_strategy) continue;  // a strategy the sweep was not asked for
      // The tune's default candidate of each strategy is the sweep's point at the tune's cores
      // (and, for the cluster, its nodes) with the sweep's settings.
      const PointSpec of_default(model, strategy, cores, strategy == "cluster" ? nodes : 1);
      const auto at = std::find_if(plan.begin(), plan.end(), [&](const PointSpec& p) {
        return p.variant.empty() && p.id() == of_default.id();
      });
      if (at == plan.end()) {
        fail(name + ": the sweep has no point " + of_default.id() + " to measure the tuned " + strategy +
             " beside (its default); add " + std::to_string(cores) + " to --cores" +
             (strategy == "cluster" && nodes > 1 ? " and " + std::to_string(nodes) + " to --nodes" : ""));
      }
      json tuned = {{"from", t.file.string()},
                    {"label", winner.at("label")},
                    {"options", winner.at("options")},
                    {"default", winner.at("default")},
                    {"default_point", of_default.id()},
                    {"tune_speedup", winner.at("speedup")},
                    {"tune_default_speedup", winner.value("default_speedup", json())}};
      if (winner.at("default").get<bool>()) {
        at->tuned = std::move(tuned);
        continue;
      }
      PointSpec point(model, strategy, winner.at("cores").get<int>(), winner.at("nodes").get<int>());
      point.options = winner.at("options").get<std::map<std::string, std::string>>();
      point.variant = "tuned";
      point.tuned = std::move(tuned);
      plan.insert(at + 1, std::move(point));
    }
  }
}

}  // namespace cnnbench
