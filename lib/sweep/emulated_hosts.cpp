// Bringing a sweep's emulated hosts up and down with scripts/emulate-hosts.sh.
#include "emulated_hosts.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "cnnbench/core.hpp"
#include "subprocess.hpp"

namespace cnnbench {

std::filesystem::path emulate_hosts_script() {
  if (const char* given = std::getenv("CNNBENCH_EMULATE_HOSTS_SCRIPT"); given != nullptr && *given) {
    return given;
  }
  return CNNBENCH_EMULATE_HOSTS_SCRIPT;
}

namespace {

// The value of KEY in the script's hosts.env (KEY=VALUE lines, values possibly single-quoted).
std::string hosts_env_value(const std::filesystem::path& file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + "=", 0) != 0) continue;
    std::string value = line.substr(key.size() + 1);
    if (value.size() >= 2 && (value.front() == '\'' || value.front() == '"') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    return value;
  }
  return "";
}

}  // namespace

EmulatedHosts::EmulatedHosts(int hosts, const std::string& rate) : hosts_(hosts), rate_(rate) {
  const std::filesystem::path script = emulate_hosts_script();
  if (::access(script.c_str(), X_OK) != 0) {
    fail("--emulate-hosts: " + script.string() + " is missing or not executable (set "
         "CNNBENCH_EMULATE_HOSTS_SCRIPT to scripts/emulate-hosts.sh of a cnnbench source tree)");
  }
  std::string pattern = (std::filesystem::temp_directory_path() / "cnnbench-hosts-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    fail("--emulate-hosts: cannot make a temporary folder from " + pattern);
  }
  folder_ = pattern;
  std::vector<std::string> up = {script.string(), "up", std::to_string(hosts), "--dir",
                                 (folder_ / "hosts").string()};
  if (!rate.empty()) up.insert(up.end(), {"--rate", rate});
  const std::filesystem::path log = folder_ / "emulate-hosts.log";
  const int status = run_logged(up, log, {});
  if (status != 0) {
    const std::string why = last_line(log);
    down();
    fail("--emulate-hosts " + std::to_string(hosts) + (rate.empty() ? "" : " --rate " + rate) +
         ": bringing the hosts up failed (exit " + std::to_string(status) + "): " + why);
  }
  subnet_ = hosts_env_value(folder_ / "hosts" / "hosts.env", "SUBNET");
}

EmulatedHosts::~EmulatedHosts() { down(); }

void EmulatedHosts::down() noexcept {
  if (folder_.empty()) return;
  try {
    const std::filesystem::path log = folder_ / "emulate-hosts-down.log";
    const int status = run_logged({emulate_hosts_script().string(), "down", "--dir",
                                   (folder_ / "hosts").string()}, log, {});
    if (status != 0) {
      std::fprintf(stderr, "cnnbench: warning: taking the emulated hosts down failed (exit %d): %s; "
                   "run %s down --dir %s\n", status, last_line(log).c_str(),
                   emulate_hosts_script().c_str(), (folder_ / "hosts").c_str());
      folder_.clear();
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnnbench: warning: taking the emulated hosts down failed: %s\n", e.what());
  }
  folder_.clear();
}

nlohmann::json EmulatedHosts::record() const {
  return {{"emulated_hosts", hosts_},
          {"rate", rate_.empty() ? nlohmann::json(nullptr) : nlohmann::json(rate_)},
          {"subnet", subnet_}};
}

}  // namespace cnnbench
