// A strict reader of sweep and run reports: every field compare and plot rely on is checked for
// presence, type and range, and a bad file is rejected with its name and the field's path.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/tune.hpp"

namespace cnnbench {

namespace {

using nlohmann::json;

// Where in the file a value sits ("points[3].times_s[1]"), for error messages.
class FieldReader {
 public:
  explicit FieldReader(std::filesystem::path file) : file_(std::move(file)) {}

  [[noreturn]] void reject(const std::string& field, const std::string& expected,
                           const json* found) const {
    std::string shown = "nothing";
    if (found != nullptr) {
      shown = found->dump();
      if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    }
    fail(file_.string() + ": field " + field + ": expected " + expected + ", found " + shown);
  }

  const json& member(const json& object, const std::string& parent, const std::string& key) const {
    const std::string field = parent.empty() ? key : parent + "." + key;
    if (!object.is_object()) reject(parent.empty() ? "(root)" : parent, "an object", &object);
    const auto it = object.find(key);
    if (it == object.end()) reject(field, "a value (the field is missing)", nullptr);
    return *it;
  }

  const json& object(const json& parent, const std::string& path, const std::string& key) const {
    const json& v = member(parent, path, key);
    if (!v.is_object()) reject(join(path, key), "an object", &v);
    return v;
  }

  const json& array(const json& parent, const std::string& path, const std::string& key) const {
    const json& v = member(parent, path, key);
    if (!v.is_array()) reject(join(path, key), "an array", &v);
    return v;
  }

  std::string string(const json& parent, const std::string& path, const std::string& key) const {
    const json& v = member(parent, path, key);
    if (!v.is_string()) reject(join(path, key), "a string", &v);
    return v.get<std::string>();
  }

  bool boolean(const json& parent, const std::string& path, const std::string& key) const {
    const json& v = member(parent, path, key);
    if (!v.is_boolean()) reject(join(path, key), "true or false", &v);
    return v.get<bool>();
  }

  std::int64_t integer(const json& parent, const std::string& path, const std::string& key,
                       std::int64_t minimum) const {
    const json& v = member(parent, path, key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < minimum) {
      reject(join(path, key), "an integer >= " + std::to_string(minimum), &v);
    }
    return v.get<std::int64_t>();
  }

  void positive_number(const json& v, const std::string& field) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0) {
      reject(field, "a positive number", &v);
    }
  }

  double positive(const json& parent, const std::string& path, const std::string& key) const {
    const json& v = member(parent, path, key);
    positive_number(v, join(path, key));
    return v.get<double>();
  }

  template <class Allowed>
  std::string one_of(const json& parent, const std::string& path, const std::string& key,
                     const Allowed& allowed, const std::string& described) const {
    const std::string value = string(parent, path, key);
    for (const auto& a : allowed) {
      if (value == a) return value;
    }
    reject(join(path, key), described, &member(parent, path, key));
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

 private:
  std::filesystem::path file_;
};

// What a reader of `text` found at byte `at` where JSON was expected, said without the bytes
// themselves when they are not text (a binary file, an image given for a report).
std::string found_at(const std::string& text, std::size_t at) {
  if (at >= text.size()) return "the end of the file";
  const std::size_t head = std::min<std::size_t>(text.size(), 4096);
  const bool binary = text.find('\0') < head;
  const std::string what = binary ? " (a binary file, not a report)" : "";
  const auto byte = static_cast<unsigned char>(text[at]);
  if (byte >= 0x20 && byte < 0x7f) return std::string("'") + static_cast<char>(byte) + "'" + what;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", byte);
  return std::string("byte ") + hex + what;
}

const std::array<const char*, 2> model_names = {"fc3", "lenet5"};

void check_point(const FieldReader& r, const json& point, const std::string& path) {
  r.string(point, path, "id");
  r.one_of(point, path, "model", model_names, "\"fc3\" or \"lenet5\"");
  r.string(point, path, "strategy");
  r.integer(point, path, "cores", 1);
  r.integer(point, path, "nodes", 1);
  const std::array<const char*, 4> statuses = {"ok", "skipped", "failed", "diverged"};
  const std::string status = r.one_of(point, path, "status", statuses,
                                      "\"ok\", \"skipped\", \"failed\" or \"diverged\"");
  if (status != "ok") {
    r.string(point, path, "reason");
    return;
  }
  const json& times = r.array(point, path, "times_s");
  if (times.empty()) r.reject(path + ".times_s", "at least one repetition", &times);
  for (std::size_t i = 0; i < times.size(); ++i) {
    r.positive_number(times[i], path + ".times_s[" + std::to_string(i) + "]");
  }
  const json& time = r.object(point, path, "time");
  for (const char* key : {"median", "min", "max"}) r.positive(time, path + ".time", key);
}

void check_sweep(const FieldReader& r, const json& report) {
  r.object(report, "", "context");
  r.object(report, "", "config");
  r.boolean(report, "", "complete");
  const json& points = r.array(report, "", "points");
  for (std::size_t i = 0; i < points.size(); ++i) {
    const std::string path = "points[" + std::to_string(i) + "]";
    if (!points[i].is_object()) r.reject(path, "an object", &points[i]);
    check_point(r, points[i], path);
  }
}

void check_run(const FieldReader& r, const json& report) {
  r.object(report, "", "context");
  const json& config = r.object(report, "", "config");
  r.one_of(config, "config", "model", model_names, "\"fc3\" or \"lenet5\"");
  r.string(config, "config", "strategy");
  r.integer(config, "config", "threads", 1);
  const json& metrics = r.object(report, "", "metrics");
  r.positive(metrics, "metrics", "train_seconds");
}

}  // namespace

namespace {

// The JSON object of a report file, its schema_version the one this cnnbench reads for its kind.
json parse_report_file(const std::filesystem::path& path, const FieldReader& r) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) fail(path.string() + ": is a folder, not a report");
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path.string() + ": cannot open: " + std::strerror(errno));
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad()) fail(path.string() + ": cannot read: " + std::strerror(errno));
    text = std::move(buffer).str();
  }
  json report;
  try {
    report = json::parse(text);
  } catch (const json::parse_error& e) {
    const std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
    throw FormatError(path, at, "valid JSON", found_at(text, at));
  } catch (const json::out_of_range&) {
    fail(path.string() + ": invalid JSON: a number too large for a double");
  }
  if (!report.is_object()) r.reject("(root)", "a JSON object", &report);
  const std::int64_t version = r.integer(report, "", "schema_version", 0);
  const std::string kind = r.string(report, "", "kind");
  const int expected = kind == "sweep" ? sweep_schema_version : kind == "tune" ? tune_schema_version : report_schema_version;
  if (version != expected) {
    r.reject("schema_version", "version " + std::to_string(expected) + " (the one this cnnbench reads)",
             &report["schema_version"]);
  }
  return report;
}

// A strategy option's value as the tune wrote it: a string (what `train` takes on its command line).
void check_options(const FieldReader& r, const json& options, const std::string& path) {
  if (!options.is_object()) r.reject(path, "an object of strategy options", &options);
  for (const auto& [name, value] : options.items()) {
    if (!value.is_string()) r.reject(path + "." + name, "a string", &value);
  }
}

}  // namespace

nlohmann::json read_report(const std::filesystem::path& path) {
  const FieldReader r(path);
  json report = parse_report_file(path, r);
  const std::string kind = report.at("kind").get<std::string>();
  if (kind == "sweep") {
    check_sweep(r, report);
  } else if (kind == "run") {
    check_run(r, report);
  } else {
    r.reject("kind", "\"sweep\" or \"run\"", &report["kind"]);
  }
  return report;
}

nlohmann::json read_tune_report(const std::filesystem::path& path) {
  const FieldReader r(path);
  json report = parse_report_file(path, r);
  r.one_of(report, "", "kind", std::array{"tune"}, "\"tune\" (a report of cnnbench tune)");
  if (r.boolean(report, "", "interrupted")) {
    fail(path.string() + ": the tune was interrupted before it measured its candidates; run it again");
  }
  const json& config = r.object(report, "", "config");
  r.one_of(config, "config", "model", model_names, "\"fc3\" or \"lenet5\"");
  r.integer(config, "config", "cores", 1);
  r.integer(config, "config", "nodes", 1);
  r.integer(config, "config", "batch", 1);
  const json& measured = r.array(report, "", "measured");
  const json& winners = r.object(report, "", "winners");
  for (const auto& [strategy, winner] : winners.items()) {
    const std::string at = "winners." + strategy;
    if (winner.is_null()) continue;  // none of its candidates was measured
    if (!winner.is_object()) r.reject(at, "an object or null", &winner);
    r.string(winner, at, "label");
    r.boolean(winner, at, "default");
    r.positive(winner, at, "speedup");
    check_options(r, r.member(winner, at, "options"), at + ".options");
    // Reports of tunes before the winner said its cores and nodes: the measured candidate's.
    if (!winner.contains("cores") || !winner.contains("nodes")) {
      const std::string id = r.string(winner, at, "id");
      const auto it = std::find_if(measured.begin(), measured.end(), [&](const json& m) {
        return m.is_object() && m.value("id", "") == id;
      });
      if (it == measured.end()) r.reject(at + ".id", "the id of a measured candidate", &winner.at("id"));
      report["winners"][strategy]["cores"] = r.integer(*it, "measured[" + id + "]", "cores", 1);
      report["winners"][strategy]["nodes"] = r.integer(*it, "measured[" + id + "]", "nodes", 1);
    } else {
      r.integer(winner, at, "cores", 1);
      r.integer(winner, at, "nodes", 1);
    }
  }
  return report;
}

}  // namespace cnnbench
