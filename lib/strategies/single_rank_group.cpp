// The one-rank group (every build) and how a process tells that an MPI launcher started it.
// Builds without MPI also get join_rank_group() here.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "rank_group.hpp"

namespace cnnbench {

namespace {

class SingleRankGroup final : public RankGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int node_rank() const override { return 0; }
  int node_size() const override { return 1; }
  bool any_thread_may_call() const override { return true; }
  void sum_in_rank_order(float*, std::size_t) override {}
  void sum_in_rank_order(double*, std::size_t) override {}
  void sum(float*, std::size_t) override {}
  void sum(double*, std::size_t) override {}
  void start_sum(float*, std::size_t) override {}
  void start_sum(double*, std::size_t) override {}
  void start_sum_of_own_segment(const float* data, std::size_t count, float* own) override {
    std::copy(data, data + count, own);
  }
  void start_share_segments(float*, std::size_t) override {}
  bool progress_sums() override { return true; }
  void wait_for_sums() override {}
  std::vector<std::string> gather_to_all(const std::string& mine) override { return {mine}; }
  std::vector<int> gather_on_node(const std::vector<int>& mine) override { return mine; }
  bool any_rank(bool mine) override { return mine; }
  void end_job_after_error(const std::string&) override {}
  void end_job_at_exit() override {}
};

// Launchers and the variables they set in every rank: Open MPI (mpirun), MPICH and Intel MPI
// (hydra's PMI), PMIx (Open MPI 5, srun --mpi=pmix).
constexpr const char* launcher_variables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK",
                                              "PMIX_RANK"};

}  // namespace

std::unique_ptr<RankGroup> make_single_rank_group() { return std::make_unique<SingleRankGroup>(); }

// The tasks of the srun step this process is one of (SLURM_STEP_NUM_TASKS); 0 outside a step.
// A batch script or an salloc shell is not a step.
int srun_step_tasks() {
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (std::getenv("SLURM_STEP_ID") == nullptr || tasks == nullptr) return 0;
  return std::atoi(tasks);
}

std::string this_rank_host() {
  if (const char* host = std::getenv("CNNBENCH_HOST"); host != nullptr && *host != 0) return host;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

// srun of several tasks counts as a launcher even without its MPI plugin (no PMIX_RANK), so
// that its tasks fail together with a message rather than train alone side by side.
bool started_by_mpi_launcher() {
  for (const char* name : launcher_variables) {
    if (std::getenv(name) != nullptr) return true;
  }
  return srun_step_tasks() > 1;
}

#if !CNNBENCH_HAVE_MPI
namespace {
// Ranks the launcher started, when it says so in a variable; 0 when it does not.
int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return srun_step_tasks();
}

}  // namespace

std::unique_ptr<RankGroup> join_rank_group() {
  if (launcher_world_size() > 1) {
    fail("this cnnbench was built without MPI (CNNBENCH_WITH_MPI=OFF or MPI not found), so its " +
         std::to_string(launcher_world_size()) +
         " processes under mpirun or srun cannot share the training; run one process, or rebuild "
         "with MPI");
  }
  return make_single_rank_group();
}
#endif

}  // namespace cnnbench
