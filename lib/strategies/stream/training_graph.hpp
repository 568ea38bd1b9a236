// FC-3 and LeNet-5 as stream graphs: a source of micro-batches, forward layers expanded by
// splitjoins into parameter blocks, the loss actor, backward layers, and a sink that ends a step.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cnnbench/stream.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

// How weights and micro-batches stay in step (DESIGN.md, "Stream strategy").
enum class Consistency { strict, group_async, async };
Consistency parse_consistency(const std::string& name);  // Error naming --consistency
const char* consistency_name(Consistency consistency);

// What the source, loss and sink actors share: the data, the step range of the current
// run_steps call and the count of finished steps the source's flow control watches.
struct TrainingRun {
  const Dataset* data = nullptr;
  ModelKind model = ModelKind::lenet5;
  int batch = 64;
  int microbatches = 4;
  int micro_batch = 16;
  Consistency consistency = Consistency::strict;
  int window = 4;  // micro-batches that may be in flight at once
  // Sample fission: the net is built this many times, each copy training on its own slice of
  // every micro-batch (part samples), and the copies' gradients are summed before each update.
  int sample_groups = 1;
  int part = 16;  // the most samples a copy gets: micro_batch / sample_groups, more when balancing
  int cores = 1;
  // Dynamic balancing of the copies (--balance dynamic): shares follow the copies' busy times.
  bool balance_dynamic = false;
  std::vector<int> shares;                 // the source's samples per copy for the next group
  std::vector<std::int64_t> copy_samples;  // samples each copy was given over the run
  std::vector<int> counts, offsets;        // window x sample_groups: each micro-batch in flight
  std::unique_ptr<std::atomic<std::int64_t>[]> busy_ns;  // per copy, added by its actors
  std::vector<std::int64_t> busy_seen;     // the source's last reading of busy_ns
  int slow_copy = -1;        // --slowdown N:FACTOR (testing): copy N's actors take FACTOR x longer
  double slow_factor = 1.0;
  SgdConfig sgd;

  StepRange range;
  const StepCallback* on_step = nullptr;
  std::int64_t next_sequence = 0;            // the source's next micro-batch (global numbering)
  std::atomic<std::int64_t> completed_steps{0};  // global optimizer steps the sink has finished

  // The sample indices of micro-batch `sequence` of the current range.
  const std::uint32_t* samples_of(std::int64_t sequence) const;
  // Each copy's loss sum of each micro-batch in flight, written by the loss actors and read by
  // the sink (the channels between them order the two).
  std::vector<double> loss_sums;  // window x sample_groups
  double& loss_sum(std::int64_t sequence, int copy) { return loss_sums[slot(sequence, copy)]; }
  // Samples of micro-batch `sequence` that copy `copy` trains on, and where they start. The source
  // writes them before it emits the micro-batch, so the channels order them before every reader.
  int count(std::int64_t sequence, int copy) const { return counts[slot(sequence, copy)]; }
  int offset(std::int64_t sequence, int copy) const { return offsets[slot(sequence, copy)]; }
  void assign_shares(std::int64_t sequence);  // the source, before emitting `sequence`
  void add_busy(int copy, double seconds);
  std::size_t slot(std::int64_t sequence, int copy) const {
    return std::size_t(sequence % window) * std::size_t(sample_groups) + std::size_t(copy);
  }
};

// How many blocks each layer's splitjoins expand into.
struct LayerWidths {
  int c1_kernel_groups = 1, c1_channel_groups = 1;
  int c2_kernel_groups = 1, c2_channel_groups = 1;
  int f1_blocks = 1, f2_blocks = 1, f3_blocks = 1;
  int sample_groups = 1;  // copies of the whole net, each on a slice of every micro-batch
};
// The paper's graph (sample_groups 1) for FC-3 and for `consistency` async; LeNet-5 in strict and
// group-async gets one copy of the net per core (sample fission; the most copies up to `cores`
// that divide the micro-batch), each copy's layers split for the cores it has left.
LayerWidths default_widths(ModelKind model, int cores, Consistency consistency,
                           int micro_batch);
// `spec` over the defaults, where the layers' widths default to the cores each copy has: s=1
// on 2 cores gives the paper's graph with its blocks spread over both.
LayerWidths choose_widths(const std::string& spec, ModelKind model, int cores,
                          Consistency consistency, int micro_batch);
// `spec` ("c1k=2,c2c=2,f1=2"; keys s c1k c1c c2k c2c f1 f2 f3) applied over `widths`; Error
// naming --widths and the bad item. Each width must be >= 1 and at most the layer's own size.
LayerWidths parse_widths(const std::string& spec, ModelKind model, LayerWidths widths);

// A block of parameters owned by one forward/backward actor pair (so by one core): packed copies
// of some runs of the model's flat buffers, with their gradients and momentum, and the version
// bookkeeping of the consistency modes.
class ParamBlock {
 public:
  struct Run {
    std::size_t offset = 0, count = 0;  // in the model's flat buffer
  };
  ParamBlock(std::string name, std::vector<Run> runs, const TrainingRun& run);

  const std::string& name() const { return name_; }
  std::size_t size() const { return size_; }
  void load(const Model& model);   // params and momentum from the model; versions restart
  void store(Model& model);  // the newest params and momentum into the model

  // The weights micro-batch `sequence` uses (forward and backward alike) and their version.
  float* weights_for(std::int64_t sequence);
  std::int64_t version_for(std::int64_t sequence);
  // Where copy `copy` of the net adds the gradients of micro-batch `sequence`.
  float* grads(std::int64_t sequence, int copy);
  // After the backward of `sequence` by copy `copy` added its gradients: counts its staleness
  // and, when the last copy finishes a group, sums the copies' gradients in copy order and
  // applies SGD: at once on that copy's thread, or, in strict with several copies, in the first
  // copy to need the weights again (see settle()).
  void finish_backward(std::int64_t sequence, std::int64_t version_used, int copy);
  std::vector<std::int64_t> staleness() const;  // histogram: staleness -> micro-batches

 private:
  int buffer_for(std::int64_t sequence) const;
  void update(std::int64_t group);
  // strict with several copies: the group's update waits until a copy next reads the weights.
  // The last copy to finish a group is the slowest one, and strict drains before the next group,
  // so the copy that runs ahead does the sum and the step while the slow one catches up; a copy
  // that finds it under way waits for it (never for long: the claimant is running it).
  void settle();

  std::string name_;
  std::vector<Run> runs_;
  std::size_t size_ = 0;
  const TrainingRun& run_;
  aligned_vector<float> weights_[2];  // group-async keeps two versions; the others use [0]
  std::int64_t buffer_version_[2] = {0, 0};
  // Gradients per copy and per group parity (with several copies, one copy may start group g + 1
  // while the last one still sums group g).
  int copies_ = 1;
  std::vector<aligned_vector<float>> grads_;  // [copy * 2 + parity]
  std::vector<float*> parts_[2];              // per parity: each copy's gradients, in copy order
  aligned_vector<float> momentum_;
  std::atomic<std::int64_t> updates_{0};
  std::atomic<int> pending_[2] = {1, 1};  // copies yet to finish the group, per parity
  bool lazy_ = false;                      // strict with several copies
  std::atomic<int> due_{0};                // lazy: 0 none, 1 an update is due, 2 one is running
  std::int64_t due_group_ = 0;
  std::vector<std::vector<std::int64_t>> staleness_;  // per copy
};

struct TrainingGraph {
  stream::Node root;
  std::vector<std::shared_ptr<ParamBlock>> blocks;
};
TrainingGraph build_training_graph(TrainingRun& run, const LayerWidths& widths);

}  // namespace cnnbench
