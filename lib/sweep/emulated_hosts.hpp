// A sweep's emulated hosts: scripts/emulate-hosts.sh brings N network namespaces up before the
// first point and down after the last, and the cluster points launch their ranks through the set's
// own mpirun, one rank per host, over real TCP (docs/cluster.md, "Emulated hosts").
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace cnnbench {

class EmulatedHosts {
 public:
  // Brings `hosts` hosts up (each link capped at `rate` when it is not empty) in a fresh
  // temporary folder. Error with the script's own message when it cannot (not root, no `ip`).
  EmulatedHosts(int hosts, const std::string& rate);
  // Brings them down and removes the folder, whatever the sweep did meanwhile.
  ~EmulatedHosts();
  EmulatedHosts(const EmulatedHosts&) = delete;
  EmulatedHosts& operator=(const EmulatedHosts&) = delete;

  // The set's mpirun: Open MPI's, run inside host 0 with the hostfile, the rsh agent and the TCP
  // transport on the emulated subnet.
  std::filesystem::path mpirun() const { return folder_ / "hosts" / "mpirun"; }
  // {"emulated_hosts": N, "rate": R or null, "subnet": "10.213.x.0/24"} for the sweep's config.
  nlohmann::json record() const;

 private:
  void down() noexcept;

  std::filesystem::path folder_;  // the temporary folder: hosts/ (the set) and the script's log
  int hosts_ = 0;
  std::string rate_, subnet_;
};

// The script that makes the hosts: CNNBENCH_EMULATE_HOSTS_SCRIPT when set, else the one of the
// source tree this binary was built from.
std::filesystem::path emulate_hosts_script();

}  // namespace cnnbench
