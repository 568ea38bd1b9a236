// The MPI ranks of a job as the strategies see them (cluster, GPU): who am I, sum this buffer
// over every rank (now, or started now and finished later), agree to stop, end the job. MPI
// stays behind this interface, so that code using it never includes mpi.h, builds without MPI
// too, and can be tested on one process with a group that simulates several ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cnnbench {

class RankGroup {
 public:
  virtual ~RankGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank among the ranks on this machine (0 on a one-rank job): picks a device or cores per
  // rank; node_size() ranks share the machine.
  virtual int node_rank() const = 0;
  virtual int node_size() const = 0;
  // Whether any thread may call the group (one at a time, under the caller's lock); when false,
  // only the thread that made the group may.
  virtual bool any_thread_may_call() const = 0;

  // Collective: every rank calls it with the same count. Afterwards data[i] holds
  // ((v_0[i] + v_1[i]) + v_2[i]) + ... over ranks 0, 1, 2, ... in that order, with the same bits
  // on every rank, whatever the MPI library's own reduction algorithms would do.
  virtual void sum_in_rank_order(float* data, std::size_t count) = 0;
  virtual void sum_in_rank_order(double* data, std::size_t count) = 0;

  // Collective: afterwards data[i] holds the sum of every rank's data[i] as the MPI library's
  // allreduce adds them (MPI_SUM): an order fixed for a given library and rank count, the same
  // bits on every rank, but not rank order. The cluster strategy's sums.
  virtual void sum(float* data, std::size_t count) = 0;
  virtual void sum(double* data, std::size_t count) = 0;

  // The same sum, started now and finished by wait_for_sums() (MPI_Iallreduce): a gradient
  // bucket's sum runs while backward computes the next one. Collective: every rank starts the
  // same sums in the same order. `data` stays untouched by the caller until wait_for_sums().
  virtual void start_sum(float* data, std::size_t count) = 0;
  virtual void start_sum(double* data, std::size_t count) = 0;
  // Lets the started sums advance (MPI moves them only inside its calls); true when all are done.
  virtual bool progress_sums() = 0;
  // Returns when every started sum has finished; their buffers then hold the sums.
  virtual void wait_for_sums() = 0;

  // The two halves of a sum with an update between them (--rank-update sharded): rank r owns
  // segment r of a buffer, cut as even_share(count, size(), r) cuts it (balance.hpp).
  // Started now and finished by wait_for_sums(), like start_sum; every rank starts the same calls
  // in the same order. `data` stays untouched by the caller until then.
  //  - start_sum_of_own_segment: afterwards own[0, segment) holds this rank's segment of data
  //    summed over the ranks in rank order, ((v_0 + v_1) + v_2) + ...; data itself is only read.
  //  - start_share_segments: afterwards every rank's data holds each rank's own segment of it
  //    (an allgather in place).
  virtual void start_sum_of_own_segment(const float* data, std::size_t count, float* own) = 0;
  virtual void start_share_segments(float* data, std::size_t count) = 0;

  // Collective: every rank's text, in rank order, on every rank.
  virtual std::vector<std::string> gather_to_all(const std::string& mine) = 0;
  // Collective over the ranks of this machine, each passing the same count: their ints, in
  // node-rank order, on each of them.
  virtual std::vector<int> gather_on_node(const std::vector<int>& mine) = 0;

  // Collective: true on every rank when any rank passed true.
  virtual bool any_rank(bool mine) = 0;

  // How long one collective may wait for the other ranks (--comm-timeout); past it the job ends
  // with a line naming the ranks that stopped answering (docs/cluster.md, "A lost link or a hung
  // rank"). 0, the start: wait as long as it takes. A group whose ranks cannot be lost ignores it.
  virtual void set_comm_timeout(double seconds) { (void)seconds; }

  // Collective: what this rank adds to its steady clock (nanoseconds) to read rank 0's, from
  // `rounds` ping-pongs of each rank with rank 0 (estimate_clock_offset, trace.hpp), so that a
  // trace lines up ranks on different machines. 0 on rank 0, and for a group whose ranks share
  // one clock.
  virtual std::int64_t clock_offset_to_rank0(int rounds) {
    (void)rounds;
    return 0;
  }

  // After an error on this rank: ends the whole job at once (other ranks may be blocked in a
  // collective and would wait forever), with a line on stderr naming this rank and the error.
  // On a one-rank job it returns, and the caller passes the error on.
  virtual void end_job_after_error(const std::string& message) = 0;
  // The process is leaving with an error raised outside the group's calls: make its exit end
  // the whole job rather than wait for the other ranks.
  virtual void end_job_at_exit() = 0;
};

// Runs `body`; when it throws on a rank of a multi-rank job, the whole job ends at once with a
// line naming the rank (the other ranks may be blocked in a collective); on one rank the error
// passes on to the caller.
template <class Body>
void run_or_end_job(RankGroup& group, Body&& body) {
  try {
    body();
  } catch (const std::exception& error) {
    if (group.size() > 1) group.end_job_after_error(error.what());
    throw;
  } catch (...) {
    if (group.size() > 1) group.end_job_after_error("an unknown error");
    throw;
  }
}

// The ranks of this job: MPI_COMM_WORLD when the process was started by an MPI launcher (mpirun,
// mpiexec, srun) in a build with MPI, else a group of one rank. A one-rank group never
// initialises MPI, so a plain run stays exactly what it was without mpirun.
std::unique_ptr<RankGroup> join_rank_group();
// The group of one rank, in every build: sums and gathers return their input.
std::unique_ptr<RankGroup> make_single_rank_group();
// MPI_COMM_WORLD's ranks, initialising MPI if needed (builds with MPI only). Collective.
std::unique_ptr<RankGroup> make_mpi_rank_group();
// Whether the environment shows an MPI launcher started this process (OMPI_COMM_WORLD_SIZE,
// PMI_SIZE, PMIX_RANK, ..., or an srun step of several tasks).
bool started_by_mpi_launcher();
// The tasks of the srun step this process is one of; 0 outside a step (single_rank_group.cpp).
int srun_step_tasks();
// What a rank knows of its run when the job ends because another rank is lost, whichever layer
// noticed first (--comm-timeout, or the launcher's SIGTERM after Open MPI lost a daemon or a
// socket): run_training opens a scope for the run and notes each checkpoint on every rank.
class JobNotesScope {
 public:
  explicit JobNotesScope(std::function<bool()> stop_requested);
  ~JobNotesScope();
  JobNotesScope(const JobNotesScope&) = delete;
  JobNotesScope& operator=(const JobNotesScope&) = delete;
};
// Whether the run was asked to stop (SIGINT or SIGTERM); false outside a run.
bool job_stop_requested();
// The run's checkpoint at `step` is in `file` (written by the primary rank, or resumed from).
void note_checkpoint(const std::string& file, std::int64_t step);
// "the last checkpoint is FILE (step S)", or "no checkpoint was written".
std::string last_checkpoint_text();

// The host this rank runs on, as the reports and the lost-rank message name it: CNNBENCH_HOST
// when set (emulated hosts on one machine set it), else the machine's name.
std::string this_rank_host();

}  // namespace cnnbench
