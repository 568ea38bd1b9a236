// The actors that train FC-3 and LeNet-5 on the stream runtime and the builder that wires them
// into the paper's graph: each layer a splitjoin of parameter blocks (dense: blocks of output
// neurons; conv: kernel groups x input-channel groups with a summing join), forward actors, the
// loss actor, backward actors. Tokens are micro-batches.
#include "training_graph.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "cnnbench/balance.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"

namespace cnnbench {

using stream::Firing;
using stream::Join;
using stream::Node;
using stream::f32_port;

Consistency parse_consistency(const std::string& name) {
  if (name == "strict") return Consistency::strict;
  if (name == "group-async") return Consistency::group_async;
  if (name == "async") return Consistency::async;
  fail("--consistency: unknown mode '" + name + "' (expected strict, group-async or async)");
}

const char* consistency_name(Consistency consistency) {
  switch (consistency) {
    case Consistency::strict: return "strict";
    case Consistency::group_async: return "group-async";
    case Consistency::async: return "async";
  }
  return "?";
}

const std::uint32_t* TrainingRun::samples_of(std::int64_t sequence) const {
  const std::int64_t step = sequence / microbatches - range.global_first;
  const std::int64_t m = sequence % microbatches;
  CNNBENCH_CHECK(step >= 0 && step < range.count, "stream: micro-batch " +
                                                      std::to_string(sequence) +
                                                      " lies outside the current step range");
  return range.order + (range.first + step) * batch + m * micro_batch;
}

void TrainingRun::add_busy(int copy, double seconds) {
  busy_ns[std::size_t(copy)].fetch_add(static_cast<std::int64_t>(seconds * 1e9),
                                       std::memory_order_relaxed);
}

// At a group's first micro-batch, dynamic balancing reads what each copy spent since the last
// group and moves samples from the slowest copy to the fastest toward equal times (the cluster's
// rule: equalize_times, 5% tolerance); every micro-batch then records the shares it runs with.
void TrainingRun::assign_shares(std::int64_t sequence) {
  if (balance_dynamic && sample_groups > 1 && sequence % microbatches == 0) {
    std::vector<double> seconds(shares.size());
    bool measured = true;
    for (std::size_t c = 0; c < shares.size(); ++c) {
      const std::int64_t busy = busy_ns[c].load(std::memory_order_relaxed);
      seconds[c] = double(busy - busy_seen[c]) * 1e-9;
      busy_seen[c] = busy;
      measured = measured && seconds[c] > 0;
    }
    if (measured) shares = equalize_times(shares, seconds, 1, part, 0.05);
  }
  int offset = 0;
  for (int c = 0; c < sample_groups; ++c) {
    counts[slot(sequence, c)] = shares[std::size_t(c)];
    if (std::size_t(c) < copy_samples.size()) copy_samples[std::size_t(c)] += shares[std::size_t(c)];
    offsets[slot(sequence, c)] = offset;
    offset += shares[std::size_t(c)];
  }
}

// Cost matters more than symmetry: every split keeps the direct 5x5 kernels (the serial fast
// path). c1 splits by kernels (one input channel: nothing to repeat); c2 splits by input channels
// only, since its direct kernel computes all 16 kernels as one vector: each block does its
// channels' share of forward, weight and input gradients, and a summing join adds the partial
// outputs before ReLU and pooling. The dense layers split by output neurons.
namespace {

// The paper's graph: each layer split into blocks for `cores` cores.
LayerWidths paper_widths(ModelKind model, int cores) {
  LayerWidths w;
  if (cores <= 1) return w;
  if (model == ModelKind::fc3) {
    w.f1_blocks = std::min(cores, 6);
    w.f2_blocks = std::min(cores, 2);
    return w;
  }
  w.c1_kernel_groups = std::min(cores, 3);
  w.c2_channel_groups = std::min(cores, 3);
  w.f1_blocks = 2;
  return w;
}

}  // namespace

// LeNet-5 gains from fission: its convolutions do much work on few parameters, so the copies'
// gradient sum and update cost little. FC-3's dense layers are the other way round (1 MB of
// parameters for little work): the sum and update, on the last copy's core, cost more than the
// copies gain, and its paper graph's neuron blocks share the update out instead.
LayerWidths default_widths(ModelKind model, int cores, Consistency consistency,
                           int micro_batch) {
  const bool fission = consistency != Consistency::async && model == ModelKind::lenet5;
  int copies = fission ? std::max(1, cores) : 1;
  while (micro_batch % copies != 0) --copies;
  LayerWidths w = paper_widths(model, std::max(1, cores / copies));
  w.sample_groups = copies;
  return w;
}

LayerWidths choose_widths(const std::string& spec, ModelKind model, int cores,
                          Consistency consistency, int micro_batch) {
  const LayerWidths chosen =
      parse_widths(spec, model, default_widths(model, cores, consistency, micro_batch));
  LayerWidths base = paper_widths(model, std::max(1, cores / chosen.sample_groups));
  base.sample_groups = chosen.sample_groups;
  return parse_widths(spec, model, base);
}

LayerWidths parse_widths(const std::string& spec, ModelKind model, LayerWidths widths) {
  struct Key {
    const char* name;
    int LayerWidths::*width;
    int limit;  // the layer's kernels, channels or output neurons
  };
  const bool lenet = model == ModelKind::lenet5;
  const Key keys[] = {{"s", &LayerWidths::sample_groups, 64},
                      {"c1k", &LayerWidths::c1_kernel_groups, lenet ? 6 : 0},
                      {"c1c", &LayerWidths::c1_channel_groups, lenet ? 1 : 0},
                      {"c2k", &LayerWidths::c2_kernel_groups, lenet ? 16 : 0},
                      {"c2c", &LayerWidths::c2_channel_groups, lenet ? 6 : 0},
                      {"f1", &LayerWidths::f1_blocks, lenet ? 120 : 300},
                      {"f2", &LayerWidths::f2_blocks, lenet ? 84 : 100},
                      {"f3", &LayerWidths::f3_blocks, 10}};
  std::size_t at = 0;
  while (at < spec.size()) {
    const std::size_t end = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, end - at);
    at = end + 1;
    const std::size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const Key* key = nullptr;
    for (const Key& k : keys) {
      if (name == k.name) key = &k;
    }
    CNNBENCH_CHECK(key != nullptr && eq != std::string::npos,
                   "--widths: '" + item + "' is not NAME=COUNT with NAME one of s c1k c1c c2k c2c "
                   "f1 f2 f3");
    CNNBENCH_CHECK(key->limit > 0, std::string("--widths: ") + model_name(model) +
                                        " has no layer '" + name + "'");
    int value = 0;
    const std::string text = item.substr(eq + 1);
    const bool digits = !text.empty() && text.size() <= 4 &&
                        std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) value = std::stoi(text);
    CNNBENCH_CHECK(digits && value >= 1 && value <= key->limit,
                   "--widths: '" + item + "': the width must be a whole number from 1 to " +
                       std::to_string(key->limit));
    widths.*(key->width) = value;
  }
  return widths;
}

// ---- parameter blocks -------------------------------------------------------------------------

ParamBlock::ParamBlock(std::string name, std::vector<Run> runs, const TrainingRun& run)
    : name_(std::move(name)), runs_(std::move(runs)), run_(run), copies_(run.sample_groups) {
  for (const Run& r : runs_) size_ += r.count;
  for (auto& w : weights_) w.assign(size_, 0.0f);
  grads_.assign(std::size_t(copies_) * 2, aligned_vector<float>(size_, 0.0f));
  for (std::size_t parity = 0; parity < 2; ++parity) {
    parts_[parity].clear();
    for (std::size_t c = 0; c < std::size_t(copies_); ++c) {
      parts_[parity].push_back(grads_[c * 2 + parity].data());
    }
  }
  momentum_.assign(size_, 0.0f);
  staleness_.resize(static_cast<std::size_t>(copies_));
  lazy_ = copies_ > 1 && run.consistency == Consistency::strict;
}

void ParamBlock::load(const Model& model) {
  std::size_t at = 0;
  for (const Run& r : runs_) {
    std::copy_n(model.params.data() + r.offset, r.count, weights_[0].data() + at);
    std::copy_n(model.momentum.data() + r.offset, r.count, momentum_.data() + at);
    at += r.count;
  }
  weights_[1] = weights_[0];
  buffer_version_[0] = buffer_version_[1] = 0;
  for (auto& grads : grads_) std::fill(grads.begin(), grads.end(), 0.0f);
  updates_.store(0);
  for (auto& pending : pending_) pending.store(copies_);
  due_.store(0);
  for (auto& histogram : staleness_) histogram.clear();
}

void ParamBlock::store(Model& model) {
  settle();
  const int newest = buffer_version_[1] > buffer_version_[0] ? 1 : 0;
  std::size_t at = 0;
  for (const Run& r : runs_) {
    std::copy_n(weights_[newest].data() + at, r.count, model.params.data() + r.offset);
    std::copy_n(momentum_.data() + at, r.count, model.momentum.data() + r.offset);
    at += r.count;
  }
}

// group-async: group g computes on the buffer its group-before-last's update wrote, (g + 1) % 2,
// while group g - 1's update lands in the other one.
int ParamBlock::buffer_for(std::int64_t sequence) const {
  if (run_.consistency != Consistency::group_async) return 0;
  return static_cast<int>((sequence / run_.microbatches + 1) & 1);
}

float* ParamBlock::weights_for(std::int64_t sequence) {
  settle();
  return weights_[buffer_for(sequence)].data();
}

std::int64_t ParamBlock::version_for(std::int64_t sequence) {
  settle();
  return buffer_version_[buffer_for(sequence)];
}

void ParamBlock::settle() {
  if (!lazy_) return;
  int state = due_.load(std::memory_order_acquire);
  if (state == 0) return;
  if (state == 1 && due_.compare_exchange_strong(state, 2, std::memory_order_acq_rel)) {
    update(due_group_);
    due_.store(0, std::memory_order_release);
    return;
  }
  while (due_.load(std::memory_order_acquire) != 0) {
  }
}

float* ParamBlock::grads(std::int64_t sequence, int copy) {
  const auto parity = static_cast<std::size_t>((sequence / run_.microbatches) & 1);
  return grads_[std::size_t(copy) * 2 + parity].data();
}

std::vector<std::int64_t> ParamBlock::staleness() const {
  std::vector<std::int64_t> total;
  for (const auto& histogram : staleness_) {
    if (total.size() < histogram.size()) total.resize(histogram.size(), 0);
    for (std::size_t s = 0; s < histogram.size(); ++s) total[s] += histogram[s];
  }
  return total;
}

void ParamBlock::finish_backward(std::int64_t sequence, std::int64_t version_used, int copy) {
  const auto staleness = static_cast<std::size_t>(
      std::max<std::int64_t>(0, updates_.load(std::memory_order_relaxed) - version_used));
  std::vector<std::int64_t>& histogram = staleness_[std::size_t(copy)];
  if (histogram.size() <= staleness) histogram.resize(staleness + 1, 0);
  ++histogram[staleness];
  if (sequence % run_.microbatches != run_.microbatches - 1) return;
  // This copy's share of the group is in; the last copy to get here updates (acq_rel: it sees
  // every other copy's gradients). Nobody touches this parity again before the sink has seen
  // the group, so the counter can be re-armed here.
  const std::int64_t group = sequence / run_.microbatches;
  std::atomic<int>& pending = pending_[group & 1];
  if (copies_ > 1 && pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  pending.store(copies_, std::memory_order_relaxed);
  if (lazy_) {
    due_group_ = group;
    due_.store(1, std::memory_order_release);
    return;
  }
  update(group);
}

// The group's gradients are complete: the copies' sums added in copy order, then one SGD step,
// as serial does once per batch, and the buffers zeroed for the group after next.
void ParamBlock::update(std::int64_t group) {
  const auto parity = static_cast<std::size_t>(group & 1);
  int target = 0;
  if (run_.consistency == Consistency::group_async) {
    target = static_cast<int>((group + 1) & 1);
    weights_[target] = weights_[1 - target];
  }
  sum_sgd_step_and_clear(weights_[target].data(), parts_[parity].data(), copies_, momentum_.data(),
                         size_, run_.sgd);
  buffer_version_[target] = updates_.fetch_add(1, std::memory_order_relaxed) + 1;
}

namespace {

// What a forward actor keeps of each micro-batch for its backward partner (same core): a ring of
// `depth` entries, one per micro-batch that can be in flight. An entry points into a token that
// the forward actor popped or pushed and whose channel retains `depth` tokens (see retained()):
// the flow control lets no more than `depth` micro-batches be in flight, so the slot is not
// reused before the backward partner has read it. No copies.
class Stash {
 public:
  explicit Stash(int depth)
      : depth_(depth), sequences_(static_cast<std::size_t>(depth), -1),
        versions_(static_cast<std::size_t>(depth), 0),
        data_(static_cast<std::size_t>(depth), nullptr) {}
  int depth() const { return depth_; }
  void keep(std::int64_t sequence, std::int64_t version, const float* data) {
    const std::size_t slot = slot_of(sequence);
    sequences_[slot] = sequence;
    versions_[slot] = version;
    data_[slot] = data;
  }
  const float* get(std::int64_t sequence, const std::string& owner) const {
    const std::size_t slot = slot_of(sequence);
    CNNBENCH_CHECK(sequences_[slot] == sequence,
                   owner + ": no saved forward state for micro-batch " + std::to_string(sequence));
    return data_[slot];
  }
  std::int64_t version(std::int64_t sequence) const { return versions_[slot_of(sequence)]; }

 private:
  std::size_t slot_of(std::int64_t sequence) const {
    return static_cast<std::size_t>(sequence) % sequences_.size();
  }
  int depth_;
  std::vector<std::int64_t> sequences_;
  std::vector<std::int64_t> versions_;
  std::vector<const float*> data_;
};

std::int64_t oldest_version(std::int64_t a, std::int64_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

// ---- the actors of one copy of the net ---------------------------------------------------------

// An actor of copy `copy` of the net: count() is how many of the micro-batch's samples its copy
// got (its ports hold run.part, the most a copy can get), and under dynamic balancing each firing's
// time adds to the copy's busy time, which the source reads to re-size the copies' shares.
class CopyActor : public stream::Actor {
 public:
  CopyActor(std::string name, std::vector<stream::Port> inputs, std::vector<stream::Port> outputs,
            TrainingRun& run, int copy)
      : Actor(std::move(name), std::move(inputs), std::move(outputs)), run_(run), copy_(copy) {}
  void fire(Firing& firing) final {
    const bool slow = copy_ == run_.slow_copy;
    if (!run_.balance_dynamic && !slow) return work(firing);
    const double start = now_seconds();
    work(firing);
    if (slow) {  // as a core this much slower would: keep it busy
      const double until = now_seconds() + (run_.slow_factor - 1.0) * (now_seconds() - start);
      while (now_seconds() < until) {
      }
    }
    run_.add_busy(copy_, now_seconds() - start);
  }

 protected:
  virtual void work(Firing& firing) = 0;
  int count(std::int64_t sequence) const { return run_.count(sequence, copy_); }

  TrainingRun& run_;
  const int copy_;
};

// ---- source, loss, sink -----------------------------------------------------------------------

// Emits micro-batch after micro-batch of the current range; its firing condition is the
// consistency mode's flow control on finished steps. With copies of the net it emits only the
// micro-batch's number and each copy's gather actor fetches its own slice of the images.
class SourceActor final : public stream::Actor {
 public:
  explicit SourceActor(TrainingRun& run)
      : Actor("source", {},
              {f32_port(run.sample_groups > 1 ? 0 : std::size_t(run.micro_batch) * 784)}),
        run_(run), labels_(static_cast<std::size_t>(run.micro_batch)) {}
  std::string kind() const override { return "source"; }
  bool can_fire() const override {
    const std::int64_t s = run_.next_sequence, m = run_.microbatches;
    const std::int64_t done = run_.completed_steps.load(std::memory_order_acquire);
    switch (run_.consistency) {
      case Consistency::strict: return s % m != 0 || done * m == s;  // flush between groups
      case Consistency::group_async: return s % m != 0 || done >= s / m - 1;
      case Consistency::async: return s - done * m < run_.window;
    }
    return false;
  }
  void fire(Firing& firing) override {
    const stream::TokenRef out = firing.output(0);
    out.header() = {run_.next_sequence, -1, 0.0};
    run_.assign_shares(run_.next_sequence);
    if (run_.sample_groups == 1) {
      gather_batch(out.as<float>().data(), labels_.data(), *run_.data,
                   run_.samples_of(run_.next_sequence), run_.micro_batch);
    }
    ++run_.next_sequence;
  }

 private:
  TrainingRun& run_;
  std::vector<std::uint8_t> labels_;
};

// A copy's slice of micro-batch images: count() samples from its offset.
class GatherActor final : public CopyActor {
 public:
  GatherActor(const std::string& prefix, TrainingRun& run, int copy)
      : CopyActor(prefix + "gather", {f32_port(0)}, {f32_port(std::size_t(run.part) * 784)}, run,
                  copy),
        labels_(static_cast<std::size_t>(run.part)) {}
  std::string kind() const override { return "gather"; }
  void work(Firing& firing) override {
    const stream::TokenRef in = firing.input(0);
    const stream::TokenRef out = firing.output(0);
    const std::int64_t sequence = in.header().sequence;
    out.header() = in.header();
    gather_batch(out.as<float>().data(), labels_.data(), *run_.data,
                 run_.samples_of(sequence) + run_.offset(sequence, copy_), count(sequence));
  }

 private:
  std::vector<std::uint8_t> labels_;
};

// Softmax cross-entropy of one micro-batch: logits in, dlogits out (scaled by 1/batch so that the
// group's micro-batches add up to the batch mean); the loss sum rides in the header.
class LossActor final : public CopyActor {
 public:
  LossActor(const std::string& prefix, TrainingRun& run, int copy)
      : CopyActor(prefix + "loss", {f32_port(std::size_t(run.part) * 10)},
                  {f32_port(std::size_t(run.part) * 10)}, run, copy),
        labels_(static_cast<std::size_t>(run.part)) {}
  std::string kind() const override { return "loss"; }
  void work(Firing& firing) override {
    const stream::TokenRef in = firing.input(0);
    const stream::TokenRef out = firing.output(0);
    const std::int64_t sequence = in.header().sequence;
    const int n = count(sequence);
    const std::uint32_t* samples = run_.samples_of(sequence) + run_.offset(sequence, copy_);
    for (int i = 0; i < n; ++i) labels_[i] = run_.data->labels[samples[i]];
    out.header() = in.header();
    out.header().scalar = softmax_xent_forward_backward(
        out.as<float>().data(), in.as<float>().data(), labels_.data(), n, 10,
        1.0f / static_cast<float>(run_.batch));
    run_.loss_sum(sequence, copy_) = out.header().scalar;
  }

 private:
  std::vector<std::uint8_t> labels_;
};

// Takes the M finished micro-batches of a step at once: the step is done, every block has applied
// its update; reports the step's mean loss.
class SinkActor final : public stream::Actor {
 public:
  explicit SinkActor(TrainingRun& run)
      : Actor("sink", {f32_port(0, run.microbatches)}, {}), run_(run) {}
  std::string kind() const override { return "sink"; }
  void fire(Firing& firing) override {
    double loss = 0;
    const std::int64_t first = firing.input(0, 0).header().sequence;
    for (int m = 0; m < run_.microbatches; ++m) {
      const stream::TokenHeader& header = firing.input(0, static_cast<std::size_t>(m)).header();
      CNNBENCH_CHECK(header.sequence == first + m && first % run_.microbatches == 0,
                     "stream sink: micro-batches arrived out of order");
      for (int c = 0; c < run_.sample_groups; ++c) loss += run_.loss_sum(header.sequence, c);
    }
    const std::int64_t step = first / run_.microbatches;
    run_.completed_steps.store(step + 1, std::memory_order_release);
    if (run_.on_step && *run_.on_step) {
      (*run_.on_step)(step - run_.range.global_first, loss / run_.batch);
    }
  }

 private:
  TrainingRun& run_;
};

// ---- dense blocks -----------------------------------------------------------------------------

// Output neurons [first, first + count) of a Linear layer (in -> out), optionally followed by ReLU.
struct DenseBlockShape {
  int in = 0, count = 0;
  bool relu = false;
  bool input_grad = true;  // false for the first layer
};

class DenseForward final : public CopyActor {
 public:
  DenseForward(std::string name, DenseBlockShape shape, std::shared_ptr<ParamBlock> block,
               TrainingRun& run, int copy, std::shared_ptr<Stash> inputs,
               std::shared_ptr<Stash> outputs)
      : CopyActor(std::move(name),
                  {retained(f32_port(std::size_t(run.part) * shape.in), inputs->depth())},
                  {retained(f32_port(std::size_t(run.part) * shape.count), outputs->depth())},
                  run, copy),
        shape_(shape), block_(std::move(block)), inputs_(std::move(inputs)),
        outputs_(std::move(outputs)) {}
  std::string kind() const override { return "dense forward"; }
  void work(Firing& firing) override {
    const stream::TokenRef in = firing.input(0);
    const stream::TokenRef out = firing.output(0);
    const std::int64_t sequence = in.header().sequence;
    const int n = count(sequence);
    const std::int64_t version = block_->version_for(sequence);
    const float* weight = block_->weights_for(sequence);
    const float* bias = weight + std::size_t(shape_.count) * shape_.in;
    float* y = out.as<float>().data();
    dense_forward(y, in.as<float>().data(), weight, bias, n, shape_.in, shape_.count);
    if (shape_.relu) relu_forward(y, y, std::size_t(n) * shape_.count);
    inputs_->keep(sequence, version, in.as<float>().data());
    if (shape_.relu) outputs_->keep(sequence, version, y);
    out.header() = in.header();
    out.header().version = oldest_version(in.header().version, version);
  }

 private:
  DenseBlockShape shape_;
  std::shared_ptr<ParamBlock> block_;
  std::shared_ptr<Stash> inputs_, outputs_;
};

class DenseBackward final : public CopyActor {
 public:
  DenseBackward(std::string name, DenseBlockShape shape, std::shared_ptr<ParamBlock> block,
                TrainingRun& run, int copy, std::shared_ptr<Stash> inputs,
                std::shared_ptr<Stash> outputs)
      : CopyActor(std::move(name), {f32_port(std::size_t(run.part) * shape.count)},
                  {f32_port(shape.input_grad ? std::size_t(run.part) * shape.in : 0)}, run,
                  copy),
        shape_(shape), block_(std::move(block)), inputs_(std::move(inputs)),
        outputs_(std::move(outputs)), dpre_(std::size_t(run.part) * shape.count) {}
  std::string kind() const override { return "dense backward"; }
  void work(Firing& firing) override {
    const stream::TokenRef in = firing.input(0);
    const stream::TokenRef out = firing.output(0);
    const std::int64_t sequence = in.header().sequence;
    const int n = count(sequence);
    const float* dout = in.as<float>().data();
    if (shape_.relu) {
      relu_backward(dpre_.data(), dout, outputs_->get(sequence, name()),
                    std::size_t(n) * shape_.count);
      dout = dpre_.data();
    }
    const float* weight = block_->weights_for(sequence);
    float* dweight = block_->grads(sequence, copy_);
    float* dbias = dweight + std::size_t(shape_.count) * shape_.in;
    dense_backward(shape_.input_grad ? out.as<float>().data() : nullptr, dweight, dbias, dout,
                   inputs_->get(sequence, name()), weight, n, shape_.in, shape_.count);
    out.header() = in.header();
    block_->finish_backward(sequence, inputs_->version(sequence), copy_);
  }

 private:
  DenseBlockShape shape_;
  std::shared_ptr<ParamBlock> block_;
  std::shared_ptr<Stash> inputs_, outputs_;
  aligned_vector<float> dpre_;
};

// ---- convolution blocks -----------------------------------------------------------------------

// Kernels [k0, k0 + shape.out_channels) over input channels [c0, c0 + shape.in_channels);
// the block owns the kernels' bias when it is the first channel group.
struct ConvBlockShape {
  Conv2dShape conv;  // batch = the most samples a copy gets, channels = this block's share
  bool owns_bias = true;
  bool input_grad = true;
  bool all_channels = true;  // the block sees every input channel of the layer
  std::size_t in_elements() const {
    return std::size_t(conv.batch) * conv.in_channels * conv.height * conv.width;
  }
  std::size_t out_elements() const {
    return std::size_t(conv.batch) * conv.out_channels * conv.out_height() * conv.out_width();
  }
  std::size_t weight_count() const {
    return std::size_t(conv.out_channels) * conv.in_channels * conv.kernel * conv.kernel;
  }
  // The direct 5x5 kernels (the serial fast path) where the block's shape allows them: a first
  // layer of one input channel with pad 2 (any number of kernels), or a layer of 16 kernels
  // without padding (whole, or a block of its input channels), whose output is then channels last
  // (B, Ho, Wo, 16). A block holding every input channel folds the ReLU in; a block of some
  // channels leaves it to the pool actor after the summing join.
  bool direct_pad2() const {
    return all_channels && owns_bias && !input_grad && conv.kernel == 5 && conv.pad == 2 &&
           conv.in_channels == 1 && conv.width >= 16 && conv.width <= 28 && conv.height <= 28;
  }
  bool direct_to16() const {
    return conv.kernel == 5 && conv.pad == 0 && conv.out_channels == 16;
  }
};

class ConvForward final : public CopyActor {
 public:
  ConvForward(std::string name, ConvBlockShape shape, std::shared_ptr<ParamBlock> block,
              TrainingRun& run, int copy, std::shared_ptr<Stash> inputs)
      : CopyActor(std::move(name), {retained(f32_port(shape.in_elements()), inputs->depth())},
                  {f32_port(shape.out_elements())}, run, copy),
        shape_(shape), block_(std::move(block)), inputs_(std::move(inputs)),
        zero_bias_(static_cast<std::size_t>(shape.conv.out_channels), 0.0f),
        scratch_(shape.direct_to16() ? conv5x5_to16_scratch_floats(shape.conv.in_channels)
                                     : shape.direct_pad2() ? 0 : shape.conv.scratch_floats()) {}
  std::string kind() const override { return "conv forward"; }
  void work(Firing& firing) override {
    const stream::TokenRef in = firing.input(0);
    const stream::TokenRef out = firing.output(0);
    const std::int64_t sequence = in.header().sequence;
    const std::int64_t version = block_->version_for(sequence);
    const float* weight = block_->weights_for(sequence);
    const float* bias = shape_.owns_bias ? weight + shape_.weight_count() : zero_bias_.data();
    Conv2dShape c = shape_.conv;
    c.batch = count(sequence);
    if (shape_.direct_pad2()) {
      conv5x5_pad2_relu_forward(out.as<float>().data(), in.as<float>().data(), weight, bias,
                                c.batch, c.out_channels, c.height, c.width);
    } else if (shape_.direct_to16()) {
      const auto forward = shape_.all_channels ? conv5x5_to16_relu_forward : conv5x5_to16_forward;
      forward(out.as<float>().data(), in.as<float>().data(), weight, bias, c.batch,
              c.in_channels, c.height, c.width, scratch_.data());
    } else {
      conv2d_forward(out.as<float>().data(), in.as<float>().data(), weight, bias, c,
                     scratch_.data());
    }
    inputs_->keep(sequence, version, in.as<float>().data());
    out.header() = in.header();
    out.header().version = oldest_version(in.header().version, version);
  }

 private:
  ConvBlockShape shape_;
  std::shared_ptr<ParamBlock> block_;
  std::shared_ptr<Stash> inputs_;
  aligned_vector<float> zero_bias_, scratch_;
};

class ConvBackward final : public CopyActor {
 public:
  ConvBackward(std::string name, ConvBlockShape shape, std::shared_ptr<ParamBlock> block,
               TrainingRun& run, int copy, std::shared_ptr<Stash> inputs)
      : CopyActor(std::move(name), {f32_port(shape.out_elements())},
                  {f32_port(shape.input_grad ? shape.in_elements() : 0)}, run, copy),
        shape_(shape), block_(std::move(block)), inputs_(std::move(inputs)),
        unused_dbias_(static_cast<std::size_t>(shape.conv.out_channels), 0.0f),
        scratch_(shape.direct_to16() ? conv5x5_to16_scratch_floats(shape.conv.in_channels)
                                     : shape.direct_pad2() ? 0 : shape.conv.scratch_floats()) {}
  std::string kind() const override { return "conv backward"; }
  void work(Firing& firing) override {
    const stream::TokenRef in = firing.input(0);
    const stream::TokenRef out = firing.output(0);
    const std::int64_t sequence = in.header().sequence;
    float* dweight = block_->grads(sequence, copy_);
    float* dbias = dweight + shape_.weight_count();
    if (!shape_.owns_bias) {
      std::fill(unused_dbias_.begin(), unused_dbias_.end(), 0.0f);
      dbias = unused_dbias_.data();
    }
    float* dinp = shape_.input_grad ? out.as<float>().data() : nullptr;
    const float* inp = inputs_->get(sequence, name());
    Conv2dShape c = shape_.conv;
    c.batch = count(sequence);
    if (shape_.direct_pad2()) {
      conv5x5_pad2_backward_weights(dweight, dbias, in.as<float>().data(), inp, c.batch,
                                    c.out_channels, c.height, c.width);
    } else if (shape_.direct_to16()) {
      conv5x5_to16_backward(dinp, dweight, dbias, in.as<float>().data(), inp,
                            block_->weights_for(sequence), c.batch, c.in_channels, c.height,
                            c.width, scratch_.data());
    } else {
      conv2d_backward(dinp, dweight, dbias, in.as<float>().data(), inp,
                      block_->weights_for(sequence), c, scratch_.data());
    }
    out.header() = in.header();
    block_->finish_backward(sequence, inputs_->version(sequence), copy_);
  }

 private:
  ConvBlockShape shape_;
  std::shared_ptr<ParamBlock> block_;
  std::shared_ptr<Stash> inputs_;
  aligned_vector<float> unused_dbias_, scratch_;
};

// How a kernel group's conv output reaches its ReLU + pool actors: planes (B, G, H, W) still
// before the ReLU, or the direct 16-kernel convolution's (B, H, W, 16), with the ReLU applied
// when one block computed it whole.
struct PoolShape {
  int planes = 0, height = 0, width = 0;  // planes = B x G, for the most samples a copy gets
  int per_sample = 0;                     // G (or 16)
  bool channels_last16 = false;           // then planes = B x 16
  bool relu_applied = false;              // the convolution's kernel folded the ReLU in
  std::size_t elements() const { return std::size_t(planes) * height * width; }
  std::size_t pooled_elements() const { return std::size_t(planes) * (height / 2) * (width / 2); }
};

// ReLU then 2x2 max-pool: (B, G, H, W) -> (B, G, H/2, W/2). The ReLU output is kept for backward.
class ReluPoolForward final : public CopyActor {
 public:
  ReluPoolForward(std::string name, PoolShape shape, TrainingRun& run, int copy,
                  std::shared_ptr<Stash> activations)
      : CopyActor(std::move(name), {retained(f32_port(shape.elements()), activations->depth())},
                  {f32_port(shape.pooled_elements())}, run, copy),
        shape_(shape), activations_(std::move(activations)) {}
  std::string kind() const override { return "relu+pool forward"; }
  // The ReLU goes in place into the input token, which backward then reads as the activation.
  void work(Firing& firing) override {
    const stream::TokenRef in = firing.input(0);
    const stream::TokenRef out = firing.output(0);
    const int n = count(in.header().sequence);
    float* activation = in.as<float>().data();
    if (!shape_.relu_applied) {
      relu_forward(activation, activation,
                   std::size_t(n) * shape_.per_sample * shape_.height * shape_.width);
    }
    activations_->keep(in.header().sequence, in.header().version, activation);
    if (shape_.channels_last16) {
      maxpool2x2_channels_last16_forward(out.as<float>().data(), activation, n, shape_.height,
                                         shape_.width);
    } else {
      maxpool2x2_forward(out.as<float>().data(), activation, n * shape_.per_sample,
                         shape_.height, shape_.width);
    }
    out.header() = in.header();
  }

 private:
  PoolShape shape_;
  std::shared_ptr<Stash> activations_;
};

class ReluPoolBackward final : public CopyActor {
 public:
  ReluPoolBackward(std::string name, PoolShape shape, TrainingRun& run, int copy,
                   std::shared_ptr<Stash> activations)
      : CopyActor(std::move(name), {f32_port(shape.pooled_elements())},
                  {f32_port(shape.elements())}, run, copy),
        shape_(shape), activations_(std::move(activations)) {}
  std::string kind() const override { return "relu+pool backward"; }
  void work(Firing& firing) override {
    const stream::TokenRef in = firing.input(0);
    const stream::TokenRef out = firing.output(0);
    const int n = count(in.header().sequence);
    const float* activation = activations_->get(in.header().sequence, name());
    if (shape_.channels_last16) {
      maxpool2x2_relu_channels_last16_backward(out.as<float>().data(), in.as<float>().data(),
                                               activation, n, shape_.height, shape_.width);
    } else {
      maxpool2x2_relu_backward(out.as<float>().data(), in.as<float>().data(), activation,
                               n * shape_.per_sample, shape_.height, shape_.width);
    }
    out.header() = in.header();
  }

 private:
  PoolShape shape_;
  std::shared_ptr<Stash> activations_;
};

// ---- the builder ------------------------------------------------------------------------------

// [first, last) of n items dealt into `parts` nearly equal shares.
std::pair<int, int> share(int n, int parts, int index) {
  return {n * index / parts, n * (index + 1) / parts};
}

double guess_seconds(double flops) { return flops / 5e9; }  // until profiling measures it

class Builder {
 public:
  // Builds copy `copy` of the net; copies after the first share the first one's blocks.
  Builder(TrainingRun& run, TrainingGraph& out, int copy)
      : run_(run), out_(out), copy_(copy),
        prefix_(run.sample_groups > 1 ? "s" + std::to_string(copy) + "." : "") {}

  // A Linear layer (+ ReLU) as `blocks` blocks of output neurons: forward is a duplicate split
  // with a concatenating join; backward a round-robin split of dout with a summing join of dinp.
  std::pair<Node, Node> dense(const std::string& layer, int in, int out, bool relu,
                              bool input_grad, int blocks) {
    const ParamTensor& weight = spec().tensor(layer + ".weight");
    const ParamTensor& bias = spec().tensor(layer + ".bias");
    std::vector<Node> forward, backward;
    std::vector<std::size_t> widths;
    for (int b = 0; b < blocks; ++b) {
      const auto [first, last] = share(out, blocks, b);
      const DenseBlockShape shape{in, last - first, relu, input_grad};
      const std::string block_name = layer + ".b" + std::to_string(b);
      const std::string name = prefix_ + block_name;
      auto block = add_block(block_name,
                             {{weight.offset + std::size_t(first) * in, std::size_t(shape.count) * in},
                              {bias.offset + std::size_t(first), std::size_t(shape.count)}});
      auto inputs = std::make_shared<Stash>(run_.window);
      auto outputs = std::make_shared<Stash>(run_.window);
      const double flops = 2.0 * run_.part * in * shape.count;
      forward.push_back(place(std::make_shared<DenseForward>(name + ".fwd", shape, block, run_,
                                                             copy_, inputs, outputs),
                              name, flops));
      backward.push_back(place(std::make_shared<DenseBackward>(name + ".bwd", shape, block, run_,
                                                               copy_, inputs, outputs),
                               name, (input_grad ? 2 : 1) * flops));
      widths.push_back(static_cast<std::size_t>(shape.count));
    }
    return {Node::splitjoin(prefix_ + layer + ".fwd", stream::Split::duplicate(),
                            std::move(forward), Join::concatenate(widths)),
            Node::splitjoin(prefix_ + layer + ".bwd", stream::Split::round_robin(widths),
                            std::move(backward), Join::sum())};
  }

  // A conv layer + ReLU + 2x2 max-pool as the paper's two-level splitjoin: kernel groups
  // (duplicate split, concatenating join of pooled planes), each an input-channel splitjoin
  // (round-robin split of channels, summing join of partial convolutions) then ReLU+pool.
  // Backward mirrors it: round-robin split of dout per kernel group, pool+ReLU backward,
  // duplicate to the channel groups, concatenating join of dinp per channel group, and a summing
  // join over kernel groups.
  std::pair<Node, Node> conv(const std::string& layer, const Conv2dShape& full, bool input_grad,
                             int kernel_groups, int channel_groups) {
    const ParamTensor& weight = spec().tensor(layer + ".weight");
    const ParamTensor& bias = spec().tensor(layer + ".bias");
    const int R = full.kernel, C = full.in_channels, Ho = full.out_height(), Wo = full.out_width();
    const int plane_in = full.height * full.width, pooled = (Ho / 2) * (Wo / 2);
    std::vector<Node> forward_groups, backward_groups;
    std::vector<std::size_t> pooled_widths;
    for (int g = 0; g < kernel_groups; ++g) {
      const auto [k0, k1] = share(full.out_channels, kernel_groups, g);
      const std::string group = prefix_ + layer + ".k" + std::to_string(g);
      const std::string group_block = layer + ".k" + std::to_string(g);
      std::vector<Node> forward_blocks, backward_blocks;
      std::vector<std::size_t> channel_widths;
      for (int h = 0; h < channel_groups; ++h) {
        const auto [c0, c1] = share(C, channel_groups, h);
        ConvBlockShape shape;
        shape.conv = full;
        shape.conv.batch = run_.part;
        shape.conv.in_channels = c1 - c0;
        shape.conv.out_channels = k1 - k0;
        shape.owns_bias = h == 0;
        shape.input_grad = input_grad;
        shape.all_channels = channel_groups == 1;
        std::vector<ParamBlock::Run> runs;
        for (int k = k0; k < k1; ++k) {
          runs.push_back({weight.offset + (std::size_t(k) * C + c0) * R * R,
                          std::size_t(c1 - c0) * R * R});
        }
        if (shape.owns_bias) runs.push_back({bias.offset + std::size_t(k0), std::size_t(k1 - k0)});
        const std::string name = group + ".c" + std::to_string(h);
        auto block = add_block(group_block + ".c" + std::to_string(h), std::move(runs));
        auto inputs = std::make_shared<Stash>(run_.window);
        const double flops = 2.0 * shape.out_elements() * (c1 - c0) * R * R;
        forward_blocks.push_back(place(
            std::make_shared<ConvForward>(name + ".fwd", shape, block, run_, copy_, inputs), name,
            flops));
        backward_blocks.push_back(place(
            std::make_shared<ConvBackward>(name + ".bwd", shape, block, run_, copy_, inputs), name,
            (input_grad ? 2 : 1) * flops));
        channel_widths.push_back(std::size_t(c1 - c0) * plane_in);
      }
      const int planes = run_.part * (k1 - k0);
      ConvBlockShape whole;  // the group's block when it has every input channel
      whole.conv = full;
      whole.conv.batch = run_.part;
      whole.conv.out_channels = k1 - k0;
      whole.input_grad = input_grad;
      // Must agree with the blocks' choice of kernel (ConvForward): one block of every channel
      // folds the ReLU into a direct kernel.
      whole.owns_bias = true;
      whole.all_channels = channel_groups == 1;
      const bool folded = whole.all_channels && (whole.direct_pad2() || whole.direct_to16());
      const bool last16 = whole.direct_to16();
      const PoolShape pool_shape{planes, Ho, Wo, last16 ? 16 : k1 - k0, last16, folded};
      auto activations = std::make_shared<Stash>(run_.window);
      const std::string pool = group + ".pool";
      forward_groups.push_back(Node::pipeline(
          group + ".fwd",
          {Node::splitjoin(group + ".channels.fwd", stream::Split::round_robin(channel_widths),
                           std::move(forward_blocks), Join::sum()),
           place(std::make_shared<ReluPoolForward>(pool + ".fwd", pool_shape, run_, copy_,
                                                   activations),
                 pool, 3.0 * planes * Ho * Wo)}));
      backward_groups.push_back(Node::pipeline(
          group + ".bwd",
          {place(std::make_shared<ReluPoolBackward>(pool + ".bwd", pool_shape, run_, copy_,
                                                    activations),
                 pool, 3.0 * planes * Ho * Wo),
           Node::splitjoin(group + ".channels.bwd", stream::Split::duplicate(),
                           std::move(backward_blocks),
                           input_grad ? Join::concatenate(channel_widths) : Join::concatenate())}));
      pooled_widths.push_back(std::size_t(k1 - k0) * pooled);
    }
    return {Node::splitjoin(prefix_ + layer + ".fwd", stream::Split::duplicate(),
                            std::move(forward_groups), Join::concatenate(pooled_widths)),
            Node::splitjoin(prefix_ + layer + ".bwd", stream::Split::round_robin(pooled_widths),
                            std::move(backward_groups), Join::sum())};
  }

  Node source() { return Node::filter(std::make_shared<SourceActor>(run_)); }
  Node loss() { return placed(std::make_shared<LossActor>(prefix_, run_, copy_)); }
  Node gather() { return placed(std::make_shared<GatherActor>(prefix_, run_, copy_)); }
  const std::string& prefix() const { return prefix_; }
  Node sink() { return Node::filter(std::make_shared<SinkActor>(run_)); }

 private:
  const ModelSpec& spec() const { return model_spec(run_.model); }

  std::shared_ptr<ParamBlock> add_block(const std::string& name,
                                        std::vector<ParamBlock::Run> runs) {
    if (copy_ > 0) {  // the first copy's block, met in the same order
      CNNBENCH_CHECK(next_block_ < out_.blocks.size() && out_.blocks[next_block_]->name() == name,
                     "stream: copy " + std::to_string(copy_) + " of the net differs at " + name);
      return out_.blocks[next_block_++];
    }
    out_.blocks.push_back(std::make_shared<ParamBlock>(name, std::move(runs), run_));
    return out_.blocks.back();
  }

  // `key` already carries the copy's prefix. With at least one copy per core a copy is placed
  // whole: its actors pass every token to the next one in the same cache.
  Node place(std::shared_ptr<stream::Actor> actor, const std::string& key, double flops) const {
    actor->set_placement(whole_copy() ? prefix_ : key);
    actor->set_work_estimate(guess_seconds(flops));
    return Node::filter(std::move(actor));
  }
  bool whole_copy() const { return run_.sample_groups > 1 && run_.sample_groups >= run_.cores; }
  Node placed(std::shared_ptr<stream::Actor> actor) const {
    if (whole_copy()) actor->set_placement(prefix_);
    return Node::filter(std::move(actor));
  }

  TrainingRun& run_;
  TrainingGraph& out_;
  int copy_;
  std::string prefix_;
  std::size_t next_block_ = 0;
};

}  // namespace

namespace {

// One copy of the net: forward layers, the loss, backward layers.
std::vector<Node> build_copy(TrainingRun& run, const LayerWidths& widths, TrainingGraph& graph,
                             int copy) {
  Builder builder(run, graph, copy);
  std::vector<Node> forward, backward;
  auto add = [&](std::pair<Node, Node> layer) {
    forward.push_back(std::move(layer.first));
    backward.insert(backward.begin(), std::move(layer.second));
  };
  if (run.model == ModelKind::fc3) {
    add(builder.dense("f1", 784, 300, true, false, widths.f1_blocks));
    add(builder.dense("f2", 300, 100, true, true, widths.f2_blocks));
    add(builder.dense("f3", 100, 10, false, true, widths.f3_blocks));
  } else {
    const int n = run.part;
    add(builder.conv("c1", Conv2dShape{n, 1, 28, 28, 6, 5, 2}, false, widths.c1_kernel_groups,
                     widths.c1_channel_groups));
    add(builder.conv("c2", Conv2dShape{n, 6, 14, 14, 16, 5, 0}, true, widths.c2_kernel_groups,
                     widths.c2_channel_groups));
    add(builder.dense("f1", 400, 120, true, true, widths.f1_blocks));
    add(builder.dense("f2", 120, 84, true, true, widths.f2_blocks));
    add(builder.dense("f3", 84, 10, false, true, widths.f3_blocks));
  }
  std::vector<Node> stages;
  if (run.sample_groups > 1) stages.push_back(builder.gather());
  for (Node& node : forward) stages.push_back(std::move(node));
  stages.push_back(builder.loss());
  for (Node& node : backward) stages.push_back(std::move(node));
  return stages;
}

}  // namespace

// With sample fission the copies form a splitjoin: the source's micro-batch numbers go to every
// copy (duplicate split), whose gather actor fetches its slice of the images; the copies end in
// the first layer's backward, which pushes nothing, so the join only counts their micro-batches
// in.
TrainingGraph build_training_graph(TrainingRun& run, const LayerWidths& widths) {
  const int copies = widths.sample_groups;
  CNNBENCH_CHECK(copies >= 1 && run.micro_batch % copies == 0,
                 "--widths s=" + std::to_string(copies) + ": must divide the micro-batch of " +
                     std::to_string(run.micro_batch) + " samples");
  CNNBENCH_CHECK(copies == 1 || run.consistency != Consistency::async,
                 "--widths s=" + std::to_string(copies) +
                     ": --consistency async updates weights while other copies read them; use "
                     "strict or group-async, or s=1");
  CNNBENCH_CHECK(run.slow_copy < copies,
                 "--slowdown " + std::to_string(run.slow_copy) + ":...: there is no copy " +
                     std::to_string(run.slow_copy) + " in a net of " + std::to_string(copies) +
                     " copies (--widths s=N)");
  run.sample_groups = copies;
  // Dynamic balancing may give a copy all but one sample per other copy.
  run.part = run.balance_dynamic ? run.micro_batch - (copies - 1) : run.micro_batch / copies;
  run.loss_sums.assign(std::size_t(run.window) * std::size_t(copies), 0.0);
  run.shares.assign(std::size_t(copies), run.micro_batch / copies);
  run.copy_samples.assign(std::size_t(copies), 0);
  run.counts.assign(std::size_t(run.window) * std::size_t(copies), run.micro_batch / copies);
  run.offsets.assign(run.counts.size(), 0);
  run.busy_ns = std::make_unique<std::atomic<std::int64_t>[]>(std::size_t(copies));
  run.busy_seen.assign(std::size_t(copies), 0);
  TrainingGraph graph;
  Builder outer(run, graph, 0);
  std::vector<Node> stages;
  stages.push_back(outer.source());
  if (copies == 1) {
    for (Node& node : build_copy(run, widths, graph, 0)) stages.push_back(std::move(node));
  } else {
    std::vector<Node> branches;
    for (int c = 0; c < copies; ++c) {
      branches.push_back(Node::pipeline("s" + std::to_string(c),
                                        build_copy(run, widths, graph, c)));
    }
    stages.push_back(Node::splitjoin("samples", stream::Split::duplicate(), std::move(branches),
                                     Join::concatenate()));
  }
  stages.push_back(outer.sink());
  graph.root = Node::pipeline(model_name(run.model), std::move(stages));
  return graph;
}

}  // namespace cnnbench
