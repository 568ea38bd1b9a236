// Running a child process for the sweep: its output into a log, a stop request forwarded to it.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace cnnbench {

// Runs args (args[0] searched in PATH) in the log's folder with stdout and stderr into log and
// waits, forwarding a stop request as SIGTERM. Returns the exit code (128 + signal when killed);
// Error when it cannot be started.
int run_logged(const std::vector<std::string>& args, const std::filesystem::path& log,
               const std::function<bool()>& stop_requested);

// Why a job failed, from its log: the last `cnnbench: error:` line, else the last non-empty
// line ("(no output)" when there is none). An MPI job's log ends in Open MPI's own notes (its
// help aggregation, a page blaming the daemons' start) after the line that names a lost rank.
std::string last_line(const std::filesystem::path& log);

}  // namespace cnnbench
