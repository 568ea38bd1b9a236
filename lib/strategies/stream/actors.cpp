// The training graph's actors: source, sink, the copies' gather and loss actors, and what each
// layer kind computes forward and backward on one micro-batch.
#include "actors.hpp"

#include <algorithm>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"

namespace cnnbench {

using stream::f32_port;
using stream::Firing;
using stream::linked;

// ---- source, copies, sink ---------------------------------------------------------------------

SourceActor::SourceActor(const TrainingPlan& plan, FlowTable& flow)
    : Actor("source", {linked(f32_port(0))},
            {f32_port(plan.sample_groups > 1 ? 0 : std::size_t(plan.micro_batch) * 784)}),
      plan_(plan), flow_(flow), labels_(static_cast<std::size_t>(plan.micro_batch)) {
  set_timing(TimeCategory::data);
}

void SourceActor::fire(Firing& firing) {
  const stream::TokenRef out = firing.output(0);
  out.header() = {next_sequence_, -1, 0.0};
  flow_.assign_shares(next_sequence_);
  if (plan_.sample_groups == 1) {
    gather_batch(out.as<float>().data(), labels_.data(), *plan_.data,
                 plan_.samples_of(next_sequence_), plan_.micro_batch);
  }
  ++next_sequence_;
}

namespace {
// Input 0: the finished micro-batches; inputs 1..copies: each copy's loss sums.
std::vector<stream::Port> sink_inputs(const TrainingPlan& plan) {
  std::vector<stream::Port> inputs{f32_port(0, plan.microbatches)};
  for (int c = 0; c < plan.sample_groups; ++c) {
    inputs.push_back(linked(f32_port(0, plan.microbatches)));
  }
  return inputs;
}
}  // namespace

SinkActor::SinkActor(const TrainingPlan& plan)
    : Actor("sink", sink_inputs(plan), {linked(f32_port(0, plan.microbatches))}), plan_(plan) {
  set_timing(TimeCategory::other);  // the step's bookkeeping and the driver's callback
}

// Sums the losses micro-batch by micro-batch, copy by copy within each: the order the step's
// mean has always been summed in.
void SinkActor::fire(Firing& firing) {
  double loss = 0;
  const std::int64_t first = firing.input(0, 0).header().sequence;
  for (int m = 0; m < plan_.microbatches; ++m) {
    const stream::TokenHeader& header = firing.input(0, static_cast<std::size_t>(m)).header();
    CNNBENCH_CHECK(header.sequence == first + m && first % plan_.microbatches == 0,
                   "stream sink: micro-batches arrived out of order");
    for (int c = 0; c < plan_.sample_groups; ++c) {
      const stream::TokenHeader& part =
          firing.input(1 + static_cast<std::size_t>(c), static_cast<std::size_t>(m)).header();
      CNNBENCH_CHECK(part.sequence == header.sequence,
                     "stream sink: the loss of copy " + std::to_string(c) + " for micro-batch " +
                         std::to_string(part.sequence) + " came with micro-batch " +
                         std::to_string(header.sequence));
      loss += part.scalar;
    }
  }
  const std::int64_t step = first / plan_.microbatches;
  if (plan_.on_step && *plan_.on_step) {
    (*plan_.on_step)(step - plan_.range.global_first, loss / plan_.batch);
  }
  for (int m = 0; m < plan_.microbatches; ++m) {  // a credit per micro-batch it frees
    firing.output(0, static_cast<std::size_t>(m)).header() = {first + m, -1, 0.0};
  }
}

CopyActor::CopyActor(std::string name, std::vector<stream::Port> inputs,
                     std::vector<stream::Port> outputs, const TrainingPlan& plan, FlowTable& flow,
                     int copy)
    : Actor(std::move(name), std::move(inputs), std::move(outputs)), plan_(plan), flow_(flow),
      copy_(copy) {}

void CopyActor::fire(Firing& firing) {
  const bool slow = copy_ == plan_.slow_copy;
  if (!plan_.balance_dynamic && !slow) return work(firing);
  const double start = now_seconds();
  work(firing);
  if (slow) {  // as a core this much slower would: keep it busy
    const double spin_start = now_seconds();
    const double until = spin_start + (plan_.slow_factor - 1.0) * (spin_start - start);
    while (now_seconds() < until) {
    }
    firing.count_as_part(ComputePart::injected, now_seconds() - spin_start);
  }
  flow_.add_busy(copy_, now_seconds() - start);
}

namespace {

class GatherActor final : public CopyActor {
 public:
  GatherActor(const std::string& prefix, const TrainingPlan& plan, FlowTable& flow, int copy)
      : CopyActor(prefix + "gather", {f32_port(0)}, {f32_port(std::size_t(plan.part) * 784)},
                  plan, flow, copy),
        labels_(static_cast<std::size_t>(plan.part)) {
    set_timing(TimeCategory::data);
  }
  std::string kind() const override { return "gather"; }

  void work(Firing& firing) override {
    const stream::TokenRef out = firing.output(0);
    out.header() = firing.input(0).header();
    const std::int64_t sequence = out.header().sequence;
    gather_batch(out.as<float>().data(), labels_.data(), *plan_.data,
                 plan_.samples_of(sequence) + flow_.offset(sequence, copy_), count(sequence));
  }

 private:
  std::vector<std::uint8_t> labels_;  // gather_batch's labels: the loss actor reads its own
};

class LossActor final : public CopyActor {
 public:
  LossActor(const std::string& prefix, const TrainingPlan& plan, FlowTable& flow, int copy)
      : CopyActor(prefix + "loss", {f32_port(std::size_t(plan.part) * 10)},
                  {f32_port(std::size_t(plan.part) * 10), linked(f32_port(0))}, plan, flow, copy),
        labels_(static_cast<std::size_t>(plan.part)) {
    set_timing(TimeCategory::compute, static_cast<int>(timed_layer_names(plan.model).size()) - 1);
  }
  std::string kind() const override { return "loss"; }

  void work(Firing& firing) override {
    const stream::TokenRef in = firing.input(0);
    const stream::TokenRef out = firing.output(0);
    const std::int64_t sequence = in.header().sequence;
    const int n = count(sequence);
    const std::uint32_t* samples = plan_.samples_of(sequence) + flow_.offset(sequence, copy_);
    for (int i = 0; i < n; ++i) labels_[i] = plan_.data->labels[samples[i]];
    out.header() = in.header();
    out.header().scalar = softmax_xent_forward_backward(
        out.as<float>().data(), in.as<float>().data(), labels_.data(), n, 10,
        1.0f / static_cast<float>(plan_.batch));
    firing.output(1).header() = out.header();
  }

 private:
  std::vector<std::uint8_t> labels_;
};

}  // namespace

std::shared_ptr<stream::Actor> make_gather_actor(const std::string& prefix,
                                                 const TrainingPlan& plan, FlowTable& flow,
                                                 int copy) {
  return std::make_shared<GatherActor>(prefix, plan, flow, copy);
}

std::shared_ptr<stream::Actor> make_loss_actor(const std::string& prefix, const TrainingPlan& plan,
                                               FlowTable& flow, int copy) {
  return std::make_shared<LossActor>(prefix, plan, flow, copy);
}

// ---- dense ------------------------------------------------------------------------------------

DenseLayer::DenseLayer(int most_samples, int inputs, int outputs, bool with_relu,
                       bool wants_input_grad)
    : part(most_samples), in(inputs), count(outputs), relu(with_relu),
      input_grad_(wants_input_grad), dpre(std::size_t(most_samples) * outputs) {}

// y (n, count) = x (n, in) W^T + b, then ReLU in place.
void DenseLayer::forward(const LayerPass& pass) {
  const float* bias = pass.weights + std::size_t(count) * in;
  dense_forward(pass.out, pass.in, pass.weights, bias, pass.samples, in, count);
  if (relu) relu_forward(pass.out, pass.out, std::size_t(pass.samples) * count);
}

void DenseLayer::backward(const LayerPass& pass) {
  const float* dout = pass.in;
  if (relu) {
    relu_backward(dpre.data(), dout, pass.saved_output, std::size_t(pass.samples) * count);
    dout = dpre.data();
  }
  float* dbias = pass.grads + std::size_t(count) * in;
  dense_backward(pass.out, pass.grads, dbias, dout, pass.saved_input, pass.weights, pass.samples,
                 in, count);
}

// ---- convolution ------------------------------------------------------------------------------

ConvLayer::ConvLayer(ConvBlockShape block)
    : shape(block),
      zero_bias(static_cast<std::size_t>(block.conv.out_channels), 0.0f),
      unused_dbias(static_cast<std::size_t>(block.conv.out_channels), 0.0f),
      scratch(block.direct_to16() ? conv5x5_to16_scratch_floats(block.conv.in_channels)
              : block.direct_pad2() ? 0
                                    : block.conv.scratch_floats()) {}

void ConvLayer::forward(const LayerPass& pass) {
  const float* bias = shape.owns_bias ? pass.weights + shape.weight_count() : zero_bias.data();
  Conv2dShape c = shape.conv;
  c.batch = pass.samples;
  if (shape.direct_pad2()) {
    conv5x5_pad2_relu_forward(pass.out, pass.in, pass.weights, bias, c.batch, c.out_channels,
                              c.height, c.width);
  } else if (shape.direct_to16()) {
    const auto forward = shape.all_channels ? conv5x5_to16_relu_forward : conv5x5_to16_forward;
    forward(pass.out, pass.in, pass.weights, bias, c.batch, c.in_channels, c.height, c.width,
            scratch.data());
  } else {
    conv2d_forward(pass.out, pass.in, pass.weights, bias, c, scratch.data());
  }
}

void ConvLayer::backward(const LayerPass& pass) {
  float* dbias = pass.grads + shape.weight_count();
  if (!shape.owns_bias) {
    std::fill(unused_dbias.begin(), unused_dbias.end(), 0.0f);
    dbias = unused_dbias.data();
  }
  Conv2dShape c = shape.conv;
  c.batch = pass.samples;
  if (shape.direct_pad2()) {
    conv5x5_pad2_backward_weights(pass.grads, dbias, pass.in, pass.saved_input, c.batch,
                                  c.out_channels, c.height, c.width);
  } else if (shape.direct_to16()) {
    conv5x5_to16_backward(pass.out, pass.grads, dbias, pass.in, pass.saved_input, pass.weights,
                          c.batch, c.in_channels, c.height, c.width, scratch.data());
  } else {
    conv2d_backward(pass.out, pass.grads, dbias, pass.in, pass.saved_input, pass.weights, c,
                    scratch.data());
  }
}

// ---- ReLU + pool ------------------------------------------------------------------------------

void ReluPoolLayer::forward(const LayerPass& pass) {
  const int n = pass.samples;
  if (!shape.relu_applied) {
    relu_forward(pass.in, pass.in, std::size_t(n) * shape.per_sample * shape.height * shape.width);
  }
  if (shape.channels_last16) {
    maxpool2x2_channels_last16_forward(pass.out, pass.in, n, shape.height, shape.width);
  } else {
    maxpool2x2_forward(pass.out, pass.in, n * shape.per_sample, shape.height, shape.width);
  }
}

void ReluPoolLayer::backward(const LayerPass& pass) {
  const int n = pass.samples;
  if (shape.channels_last16) {
    maxpool2x2_relu_channels_last16_backward(pass.out, pass.in, pass.saved_input, n, shape.height,
                                             shape.width);
  } else {
    maxpool2x2_relu_backward(pass.out, pass.in, pass.saved_input, n * shape.per_sample,
                             shape.height, shape.width);
  }
}

}  // namespace cnnbench
