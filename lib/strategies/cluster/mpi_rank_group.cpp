// RankGroup over MPI_COMM_WORLD: the one place the strategies' MPI calls live. The sum in rank
// order is a reduce-scatter in rank order followed by an allgather, so every rank ends with the
// same bits, and the bits do not depend on which algorithm the MPI library picks; the plain sums
// are MPI_Allreduce and MPI_Iallreduce.
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <numeric>

#include "../rank_group.hpp"
#include "cnnbench/balance.hpp"
#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {

namespace {

class MpiRankGroup final : public RankGroup {
 public:
  MpiRankGroup() {
    ensure_mpi_initialized();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
    MPI_Comm_rank(node_, &node_rank_);
    MPI_Comm_size(node_, &node_size_);
    int thread_level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&thread_level);
    any_thread_may_call_ = thread_level >= MPI_THREAD_SERIALIZED;
  }

  ~MpiRankGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&node_);
  }

  MpiRankGroup(const MpiRankGroup&) = delete;
  MpiRankGroup& operator=(const MpiRankGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_rank() const override { return node_rank_; }
  int node_size() const override { return node_size_; }
  bool any_thread_may_call() const override { return any_thread_may_call_; }

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

  bool progress_sums() override {
    if (requests_.empty()) return true;
    int done = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  }

  void wait_for_sums() override {
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
  }

  std::vector<std::string> gather_to_all(const std::string& mine) override {
    if (size_ == 1) return {mine};
    CNNBENCH_CHECK(mine.size() <= INT_MAX / static_cast<std::size_t>(size_),
                   "gather_to_all: text too long");
    const int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<std::size_t>(size_)), offsets(lengths.size());
    MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::exclusive_scan(lengths.begin(), lengths.end(), offsets.begin(), 0);
    std::string all(static_cast<std::size_t>(offsets.back() + lengths.back()), '\0');
    MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                   MPI_CHAR, MPI_COMM_WORLD);
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
    MPI_Allgather(mine.data(), count, MPI_INT, all.data(), count, MPI_INT, node_);
    return all;
  }

  bool any_rank(bool mine) override {
    int flag = mine ? 1 : 0;
    if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
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
    MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), type, MPI_SUM, MPI_COMM_WORLD);
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
    MPI_Alltoallv(data, segments.data(), offsets.data(), type, scratch.data(),
                  receive_counts.data(), receive_offsets.data(), type, MPI_COMM_WORLD);
    // scratch is (ranks, mine): row r holds rank r's copy of this rank's segment.
    T* sum = data + offsets[static_cast<std::size_t>(rank_)];
    for (int i = 0; i < mine; ++i) {
      T total = scratch[static_cast<std::size_t>(i)];
      for (int r = 1; r < size_; ++r) total += scratch[static_cast<std::size_t>(r * mine + i)];
      sum[i] = total;
    }
    MPI_Allgatherv(MPI_IN_PLACE, 0, type, data, segments.data(), offsets.data(), type,
                   MPI_COMM_WORLD);
  }

  int rank_ = 0, size_ = 1, node_rank_ = 0, node_size_ = 1;
  MPI_Comm node_ = MPI_COMM_NULL;  // the ranks on this machine
  bool any_thread_may_call_ = false;
  std::vector<MPI_Request> requests_;  // sums started and not yet waited for
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
