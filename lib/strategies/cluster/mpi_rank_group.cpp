// RankGroup over MPI_COMM_WORLD: the one place the strategies' MPI calls live. The sum in rank
// order is a reduce-scatter in rank order followed by an allgather, so every rank ends with the
// same bits, and the bits do not depend on which algorithm the MPI library picks; the plain sums
// are MPI_Iallreduce. Every collective is started non-blocking and tested until done, so that a
// rank that stops answering (a cut link, a hung process: TCP notices neither for many minutes)
// ends the job after --comm-timeout with a line naming it, instead of a hang.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <numeric>
#include <thread>

#include "../rank_group.hpp"
#include "cnnbench/balance.hpp"
#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/trace.hpp"

namespace cnnbench {

namespace {

// Between two tests of a collective that has not finished: yield for the first 2 ms (a sum of
// these nets takes well under that, and a yield costs nothing when the core is free), then sleep
// a tenth of the time waited so far, at most 50 us, so that a rank held up by a slower one leaves
// its core to the compute threads. Not longer: libnbc moves a collective on only inside a test,
// and a rank asleep for 1 ms let a 1gbit link's socket buffers run dry (FC-3 on 2 emulated hosts:
// 16.0 ms a step against 10.9 ms with 50 us; docs/cluster.md, "A lost link or a hung rank").
void pause_while_waiting(double waited_s) {
  if (waited_s < 2e-3) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(waited_s / 10, 5e-5)));
  }
}

// Every gradient sum is an in-place MPI_Iallreduce, for which Open MPI 4.1's libnbc picks its
// binomial trees: the whole gradient up to rank 0 and back down, 2 ceil(lg p) times its size on
// the critical path where the ring moves 2(p-1)/p of it (docs/cluster.md, "The costs": 1.7-2.6x
// faster steps over emulated 100mbit hosts). So the strategy asks libnbc for the ring before
// MPI_Init reads its settings, unless the job asked for an algorithm itself (mpirun --mca
// coll_libnbc_iallreduce_algorithm N; 0 keeps libnbc's own choice) or MPI already started.
void ask_libnbc_for_the_ring() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

class MpiRankGroup final : public RankGroup {
 public:
  MpiRankGroup() {
    ask_libnbc_for_the_ring();
    ensure_mpi_initialized();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
    MPI_Comm_rank(node_, &node_rank_);
    MPI_Comm_size(node_, &node_size_);
    int thread_level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&thread_level);
    any_thread_may_call_ = thread_level >= MPI_THREAD_SERIALIZED;
    MPI_Comm_dup(MPI_COMM_WORLD, &probe_);
    hosts_ = gather_to_all(this_rank_host());
  }

  ~MpiRankGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Comm_free(&node_);
    MPI_Comm_free(&probe_);
  }

  MpiRankGroup(const MpiRankGroup&) = delete;
  MpiRankGroup& operator=(const MpiRankGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_rank() const override { return node_rank_; }
  int node_size() const override { return node_size_; }
  bool any_thread_may_call() const override { return any_thread_may_call_; }
  void set_comm_timeout(double seconds) override { comm_timeout_s_ = seconds; }

  // Rank 0 answers each rank in turn with its clock; the others time their pings. Blocking
  // point-to-point calls on the probe communicator: every rank is here, so nothing waits long.
  std::int64_t clock_offset_to_rank0(int rounds) override {
    constexpr int clock_tag = 2;
    if (size_ == 1) return 0;
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r) {
        for (int i = 0; i < rounds; ++i) {
          char ping = 0;
          MPI_Recv(&ping, 1, MPI_CHAR, r, clock_tag, probe_, MPI_STATUS_IGNORE);
          const std::int64_t now = clock_ticks();
          MPI_Send(&now, 1, MPI_INT64_T, r, clock_tag, probe_);
        }
      }
      return 0;
    }
    return estimate_clock_offset(rounds, clock_ticks, [&] {
      char ping = 0;
      std::int64_t reference = 0;
      MPI_Send(&ping, 1, MPI_CHAR, 0, clock_tag, probe_);
      MPI_Recv(&reference, 1, MPI_INT64_T, 0, clock_tag, probe_, MPI_STATUS_IGNORE);
      return reference;
    });
  }

  void sum_in_rank_order(float* data, std::size_t count) override {
    sum_typed(data, count, MPI_FLOAT, float_scratch_);
  }
  void sum_in_rank_order(double* data, std::size_t count) override {
    sum_typed(data, count, MPI_DOUBLE, double_scratch_);
  }

  void sum(float* data, std::size_t count) override { allreduce(data, count, MPI_FLOAT); }
  void sum(double* data, std::size_t count) override { allreduce(data, count, MPI_DOUBLE); }

  void start_sum(float* data, std::size_t count) override {
    start_allreduce(data, count, MPI_FLOAT);
  }
  void start_sum(double* data, std::size_t count) override {
    start_allreduce(data, count, MPI_DOUBLE);
  }

  // An MPI_Ialltoallv hands rank r every rank's copy of segment r; wait_for_sums adds them in
  // rank order into `own` (MPI's own reduce-scatter adds in an order of its choosing).
  void start_sum_of_own_segment(const float* data, std::size_t count, float* own) override {
    if (size_ == 1) {
      std::copy(data, data + count, own);
      return;
    }
    SegmentCall& call = segment_call(count);
    const int mine = call.counts[static_cast<std::size_t>(rank_)];
    call.scratch.resize(static_cast<std::size_t>(mine) * static_cast<std::size_t>(size_));
    call.receive_counts.assign(static_cast<std::size_t>(size_), mine);
    call.receive_offsets.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) call.receive_offsets[static_cast<std::size_t>(r)] = r * mine;
    call.own = own;
    requests_.emplace_back();
    MPI_Ialltoallv(data, call.counts.data(), call.offsets.data(), MPI_FLOAT, call.scratch.data(),
                   call.receive_counts.data(), call.receive_offsets.data(), MPI_FLOAT,
                   MPI_COMM_WORLD, &requests_.back());
  }

  void start_share_segments(float* data, std::size_t count) override {
    if (size_ == 1) return;
    SegmentCall& call = segment_call(count);
    requests_.emplace_back();
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data, call.counts.data(), call.offsets.data(),
                    MPI_FLOAT, MPI_COMM_WORLD, &requests_.back());
  }

  bool progress_sums() override {
    if (requests_.empty()) return true;
    int done = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  }

  void wait_for_sums() override {
    wait_until_done(requests_, "the gradient sums (MPI_Iallreduce)");
    requests_.clear();
    for (std::size_t c = 0; c < segment_calls_used_; ++c) {
      SegmentCall& call = segment_calls_[c];
      if (call.own == nullptr) continue;  // a share: nothing to add
      const auto mine = static_cast<std::size_t>(call.counts[static_cast<std::size_t>(rank_)]);
      for (std::size_t i = 0; i < mine; ++i) {
        float total = call.scratch[i];
        for (std::size_t r = 1; r < static_cast<std::size_t>(size_); ++r) total += call.scratch[r * mine + i];
        call.own[i] = total;
      }
    }
    segment_calls_used_ = 0;
  }

  std::vector<std::string> gather_to_all(const std::string& mine) override {
    if (size_ == 1) return {mine};
    CNNBENCH_CHECK(mine.size() <= INT_MAX / static_cast<std::size_t>(size_),
                   "gather_to_all: text too long");
    const int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<std::size_t>(size_)), offsets(lengths.size());
    std::vector<MPI_Request> request(1);
    MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD, request.data());
    wait_until_done(request, "a gather of text (MPI_Iallgather)");
    std::exclusive_scan(lengths.begin(), lengths.end(), offsets.begin(), 0);
    std::string all(static_cast<std::size_t>(offsets.back() + lengths.back()), '\0');
    MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                    MPI_CHAR, MPI_COMM_WORLD, request.data());
    wait_until_done(request, "a gather of text (MPI_Iallgatherv)");
    std::vector<std::string> texts;
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      texts.push_back(all.substr(static_cast<std::size_t>(offsets[r]),
                                 static_cast<std::size_t>(lengths[r])));
    }
    return texts;
  }

  std::vector<int> gather_on_node(const std::vector<int>& mine) override {
    CNNBENCH_CHECK(mine.size() <= static_cast<std::size_t>(INT_MAX / node_size_),
                   "gather_on_node: too many values");
    const int count = static_cast<int>(mine.size());
    std::vector<int> all(mine.size() * static_cast<std::size_t>(node_size_));
    std::vector<MPI_Request> request(1);
    MPI_Iallgather(mine.data(), count, MPI_INT, all.data(), count, MPI_INT, node_, request.data());
    wait_until_done(request, "a gather on the node (MPI_Iallgather)");
    return all;
  }

  bool any_rank(bool mine) override {
    int flag = mine ? 1 : 0;
    if (size_ == 1) return mine;
    std::vector<MPI_Request> request(1);
    MPI_Iallreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, request.data());
    wait_until_done(request, "the agreement on stopping (MPI_Iallreduce)");
    return flag != 0;
  }

  void end_job_after_error(const std::string& message) override {
    if (size_ == 1) return;
    std::fprintf(stderr, "cnnbench: rank %d of %d failed: %s; ending the whole job\n", rank_, size_,
                 message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  void end_job_at_exit() override {
    if (size_ > 1) abort_job_at_exit();
  }

 private:
  static int checked_count(std::size_t count) {
    CNNBENCH_CHECK(count <= static_cast<std::size_t>(INT_MAX),
                   "sum: " + std::to_string(count) + " elements exceed MPI's int counts");
    return static_cast<int>(count);
  }

  void allreduce(void* data, std::size_t count, MPI_Datatype type) {
    if (size_ == 1) return;
    std::vector<MPI_Request> request(1);
    MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(count), type, MPI_SUM, MPI_COMM_WORLD,
                   request.data());
    wait_until_done(request, "a gradient sum (MPI_Iallreduce)");
  }

  void start_allreduce(void* data, std::size_t count, MPI_Datatype type) {
    if (size_ == 1) return;
    requests_.emplace_back();
    MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(count), type, MPI_SUM, MPI_COMM_WORLD,
                   &requests_.back());
  }

  // Rank r owns segment r of the buffer: it receives every rank's copy of that segment, sums the
  // copies in rank order and sends the sum back to all. Each rank sends and receives
  // 2 (p - 1) / p of the buffer, as a ring allreduce does.
  template <class T>
  void sum_typed(T* data, std::size_t count, MPI_Datatype type, std::vector<T>& scratch) {
    if (size_ == 1 || count == 0) return;
    CNNBENCH_CHECK(count <= static_cast<std::size_t>(INT_MAX),
                   "sum_in_rank_order: " + std::to_string(count) + " elements exceed MPI's int counts");
    const std::vector<int> segments = split_evenly(static_cast<int>(count), size_);
    std::vector<int> offsets(segments.size());
    std::exclusive_scan(segments.begin(), segments.end(), offsets.begin(), 0);
    const int mine = segments[static_cast<std::size_t>(rank_)];
    scratch.resize(static_cast<std::size_t>(mine) * static_cast<std::size_t>(size_));
    const std::vector<int> receive_counts(segments.size(), mine);
    std::vector<int> receive_offsets(segments.size());
    for (std::size_t r = 0; r < receive_offsets.size(); ++r) {
      receive_offsets[r] = static_cast<int>(r) * mine;
    }
    std::vector<MPI_Request> request(1);
    MPI_Ialltoallv(data, segments.data(), offsets.data(), type, scratch.data(),
                   receive_counts.data(), receive_offsets.data(), type, MPI_COMM_WORLD,
                   request.data());
    wait_until_done(request, "a sum in rank order (MPI_Ialltoallv)");
    // scratch is (ranks, mine): row r holds rank r's copy of this rank's segment.
    T* sum = data + offsets[static_cast<std::size_t>(rank_)];
    for (int i = 0; i < mine; ++i) {
      T total = scratch[static_cast<std::size_t>(i)];
      for (int r = 1; r < size_; ++r) total += scratch[static_cast<std::size_t>(r * mine + i)];
      sum[i] = total;
    }
    MPI_Iallgatherv(MPI_IN_PLACE, 0, type, data, segments.data(), offsets.data(), type,
                    MPI_COMM_WORLD, request.data());
    wait_until_done(request, "a sum in rank order (MPI_Iallgatherv)");
  }

  // The arrays a started segment call reads: MPI may read them until the call completes, so
  // they live in segment_calls_ (a deque: its elements stay put) until wait_for_sums.
  struct SegmentCall {
    std::vector<int> counts, offsets, receive_counts, receive_offsets;
    std::vector<float> scratch;  // (ranks, mine): rank r's copy of this rank's segment in row r
    float* own = nullptr;        // where the sum goes; nullptr for a share
  };

  SegmentCall& segment_call(std::size_t count) {
    if (segment_calls_used_ == segment_calls_.size()) segment_calls_.emplace_back();
    SegmentCall& call = segment_calls_[segment_calls_used_++];
    call.counts = split_evenly(checked_count(count), size_);
    call.offsets.resize(call.counts.size());
    std::exclusive_scan(call.counts.begin(), call.counts.end(), call.offsets.begin(), 0);
    call.own = nullptr;
    return call;
  }

  // Tests the requests until all are done. Past --comm-timeout, finds which ranks stopped
  // answering and ends the job naming them (it does not return then). So it does too when the
  // run is asked to stop while this collective is stuck (it waited 4 times the longest wait that
  // finished, and 1 s): Open MPI's launcher, having lost the daemon or socket of a cut host
  // first, sends SIGTERM and a SIGKILL 1 s later, and its own page blames the daemons' start.
  void wait_until_done(std::vector<MPI_Request>& requests, const char* operation) {
    const double start = now_seconds();
    for (;;) {
      int done = 0;
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
      const double waited = now_seconds() - start;
      if (done != 0) {
        longest_wait_s_ = std::max(longest_wait_s_, waited);
        return;
      }
      if (comm_timeout_s_ > 0 && waited > comm_timeout_s_) end_job_for_silent_ranks(operation, waited, false);
      if (!probed_after_stop_ && waited > std::max(1.0, 4 * longest_wait_s_) && job_stop_requested()) {
        probed_after_stop_ = true;
        end_job_for_silent_ranks(operation, waited, true);  // returns when every rank answers
      }
      pause_while_waiting(waited);
    }
  }

  // Every rank that timed out sends one byte to each other rank, on a communicator of its own,
  // and waits up to `grace` seconds for theirs. The live ranks of a stuck collective entered it
  // within about a step of each other and time out as close together, so a rank still silent
  // after the grace is gone: its process hung or stopped, or the link to its host is down.
  std::vector<int> silent_ranks(double grace) {
    constexpr int probe_tag = 1;
    std::vector<char> sent(static_cast<std::size_t>(size_), 1), received(sent.size(), 0);
    std::vector<int> peers;
    std::vector<MPI_Request> sends, receives;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      peers.push_back(r);
      receives.emplace_back();
      MPI_Irecv(&received[static_cast<std::size_t>(r)], 1, MPI_CHAR, r, probe_tag, probe_,
                &receives.back());
      sends.emplace_back();
      MPI_Isend(&sent[static_cast<std::size_t>(r)], 1, MPI_CHAR, r, probe_tag, probe_,
                &sends.back());
    }
    std::vector<int> answered(peers.size(), 0);
    const double deadline = now_seconds() + grace;
    while (std::count(answered.begin(), answered.end(), 0) > 0 && now_seconds() < deadline) {
      for (std::size_t i = 0; i < peers.size(); ++i) {
        if (answered[i] == 0) MPI_Test(&receives[i], &answered[i], MPI_STATUS_IGNORE);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // The requests of silent ranks stay pending: the job ends next, and their buffers with it.
    std::vector<int> silent;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (answered[i] == 0) silent.push_back(peers[i]);
    }
    return silent;
  }

  // Past --comm-timeout (`stopping` false), or asked to stop while stuck (`stopping` true: the
  // launcher ends the job; then it returns when every rank answers, an ordinary stop).
  void end_job_for_silent_ranks(const char* operation, double waited, bool stopping) {
    // A quarter of the timeout, 0.5 to 2 s: live ranks reach their deadlines within about a
    // step of each other, and the job must end soon after --comm-timeout. A stop leaves 1 s
    // before the launcher's SIGKILL, and its SIGTERM reached every live rank at once.
    const double grace = stopping ? 0.3 : std::clamp(comm_timeout_s_ / 4, 0.5, 2.0);
    const std::vector<int> silent = silent_ranks(grace);
    if (stopping && silent.empty()) return;
    // The lowest rank that still answers speaks for all, so that one line says what happened;
    // the others give it time to end the job, then end it quietly (it answered just now, and
    // mpirun may take seconds to stop a job that lost a host).
    int speaker = 0;
    while (std::find(silent.begin(), silent.end(), speaker) != silent.end()) ++speaker;
    if (speaker != rank_) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      end_this_rank(stopping);
    }
    std::string line = "cnnbench: error: ";
    if (silent.empty()) {
      line += "rank " + std::to_string(rank_) + " waited more than --comm-timeout " +
              seconds_text(comm_timeout_s_) + " s in " + operation +
              ", yet every rank answers (are they out of step?); ending the job";
    } else {
      line += "lost contact with ";
      for (std::size_t i = 0; i < silent.size(); ++i) {
        const auto r = static_cast<std::size_t>(silent[i]);
        line += (i > 0 ? ", rank " : "rank ") + std::to_string(silent[i]) + " (host " +
                (r < hosts_.size() ? hosts_[r] : "unknown") + ")";
      }
      line += " during " + std::string(operation) + ": no reply ";
      line += stopping ? "for " + seconds_text(std::round(waited * 10) / 10) +
                             " s when the launcher stopped the job (Open MPI's messages about it follow from this)"
                       : "within --comm-timeout " + seconds_text(comm_timeout_s_) + " s";
      line += "; " + last_checkpoint_text() + "; ending the job";
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    end_this_rank(stopping);
  }

  // Ends the job from this rank: MPI_Abort, or, when the launcher is ending the job already
  // (`stopping`) and may not answer an abort, leaving at once.
  [[noreturn]] static void end_this_rank(bool stopping) {
    if (stopping) {
      remove_output_in_progress();
      std::_Exit(1);
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();  // MPI_Abort does not return
  }

  int rank_ = 0, size_ = 1, node_rank_ = 0, node_size_ = 1;
  MPI_Comm node_ = MPI_COMM_NULL;  // the ranks on this machine
  MPI_Comm probe_ = MPI_COMM_NULL;  // MPI_COMM_WORLD's ranks, for finding silent ones
  std::vector<std::string> hosts_;  // by rank
  double comm_timeout_s_ = 0;       // 0: wait as long as it takes
  double longest_wait_s_ = 0;       // of the collectives that finished
  bool probed_after_stop_ = false;  // a stop probes once: every rank answered it
  bool any_thread_may_call_ = false;
  std::vector<MPI_Request> requests_;  // sums started and not yet waited for
  std::deque<SegmentCall> segment_calls_;  // reused step after step
  std::size_t segment_calls_used_ = 0;     // started and not yet waited for
  std::vector<float> float_scratch_;
  std::vector<double> double_scratch_;
};

}  // namespace

std::unique_ptr<RankGroup> join_rank_group() {
  if (!started_by_mpi_launcher()) return make_single_rank_group();
  return make_mpi_rank_group();
}

std::unique_ptr<RankGroup> make_mpi_rank_group() { return std::make_unique<MpiRankGroup>(); }

}  // namespace cnnbench
