// The builder that wires the actors into the paper's graph: each layer a splitjoin of parameter
// blocks (dense: blocks of output neurons; conv: kernel groups x input-channel groups with a
// summing join), forward actors, the loss actor, backward actors; copies of the net under sample
// fission; and the links that close it: each copy's loss to the sink, the sink's credits back to
// the source. Tokens are micro-batches.
#include <algorithm>

#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "training_graph.hpp"

namespace cnnbench {

using stream::Join;
using stream::Node;

// Cost matters more than symmetry: every split keeps the direct 5x5 kernels (the serial fast
// path). c1 splits by kernels (one input channel: nothing to repeat); c2 splits by input channels
// only, since its direct kernel computes all 16 kernels as one vector: each block does its
// channels' share of forward, weight and input gradients, and a summing join adds the partial
// outputs before ReLU and pooling. The dense layers split by output neurons.
namespace {

// [first, last) of n items dealt into `parts` nearly equal shares.
std::pair<int, int> share(int n, int parts, int index) {
  return {n * index / parts, n * (index + 1) / parts};
}

double guess_seconds(double flops) { return flops / 5e9; }  // until profiling measures it

class Builder {
 public:
  // Builds copy `copy` of the net; copies after the first share the first one's blocks.
  Builder(const TrainingPlan& plan, FlowTable& flow, TrainingGraph& out, int copy)
      : plan_(plan), flow_(flow), out_(out), copy_(copy),
        prefix_(plan.sample_groups > 1 ? "s" + std::to_string(copy) + "." : "") {}

  // A Linear layer (+ ReLU) as `blocks` blocks of output neurons: forward is a duplicate split
  // with a concatenating join; backward a round-robin split of dout with a summing join of dinp.
  std::pair<Node, Node> dense(const std::string& layer, int in, int out, bool relu,
                              bool input_grad, int blocks) {
    time_layer(layer);
    const ParamTensor& weight = spec().tensor(layer + ".weight");
    const ParamTensor& bias = spec().tensor(layer + ".bias");
    std::vector<Node> forward, backward;
    std::vector<std::size_t> widths;
    for (int b = 0; b < blocks; ++b) {
      const auto [first, last] = share(out, blocks, b);
      const int count = last - first;
      const std::string block_name = layer + ".b" + std::to_string(b);
      auto block = add_block(block_name,
                             {{weight.offset + std::size_t(first) * in, std::size_t(count) * in},
                              {bias.offset + std::size_t(first), std::size_t(count)}});
      const double flops = 2.0 * plan_.part * in * count;
      add_pair(forward, backward, prefix_ + block_name,
               DenseLayer(plan_.part, in, count, relu, input_grad), block, flops,
               (input_grad ? 2 : 1) * flops);
      widths.push_back(static_cast<std::size_t>(count));
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
    time_layer(layer);
    const int Ho = full.out_height(), Wo = full.out_width();
    std::vector<Node> forward_groups, backward_groups;
    std::vector<std::size_t> pooled_widths;
    for (int g = 0; g < kernel_groups; ++g) {
      const auto [k0, k1] = share(full.out_channels, kernel_groups, g);
      const std::string group = layer + ".k" + std::to_string(g);
      std::vector<Node> forward_blocks, backward_blocks;
      std::vector<std::size_t> channel_widths;
      for (int h = 0; h < channel_groups; ++h) {
        const auto [c0, c1] = share(full.in_channels, channel_groups, h);
        conv_block(forward_blocks, backward_blocks, layer, group + ".c" + std::to_string(h),
                   full, {k0, k1}, {c0, c1}, input_grad, channel_groups == 1);
        channel_widths.push_back(std::size_t(c1 - c0) * full.height * full.width);
      }
      const int planes = plan_.part * (k1 - k0);
      ConvBlockShape whole;  // the group's block when it has every input channel
      whole.conv = full;
      whole.conv.batch = plan_.part;
      whole.conv.out_channels = k1 - k0;
      whole.input_grad = input_grad;
      // Must agree with the blocks' choice of kernel (ConvLayer): one block of every channel
      // folds the ReLU into a direct kernel.
      whole.owns_bias = true;
      whole.all_channels = channel_groups == 1;
      const bool folded = whole.all_channels && (whole.direct_pad2() || whole.direct_to16());
      const bool last16 = whole.direct_to16();
      const PoolShape pool_shape{planes, Ho, Wo, last16 ? 16 : k1 - k0, last16, folded};
      std::vector<Node> pool_forward, pool_backward;
      add_pair(pool_forward, pool_backward, prefix_ + group + ".pool", ReluPoolLayer(pool_shape),
               nullptr, 3.0 * planes * Ho * Wo, 3.0 * planes * Ho * Wo);
      const std::string path = prefix_ + group;
      forward_groups.push_back(Node::pipeline(
          path + ".fwd", {Node::splitjoin(path + ".channels.fwd",
                                          stream::Split::round_robin(channel_widths),
                                          std::move(forward_blocks), Join::sum()),
                          std::move(pool_forward[0])}));
      backward_groups.push_back(Node::pipeline(
          path + ".bwd",
          {std::move(pool_backward[0]),
           Node::splitjoin(path + ".channels.bwd", stream::Split::duplicate(),
                           std::move(backward_blocks),
                           input_grad ? Join::concatenate(channel_widths) : Join::concatenate())}));
      pooled_widths.push_back(std::size_t(k1 - k0) * (Ho / 2) * (Wo / 2));
    }
    return {Node::splitjoin(prefix_ + layer + ".fwd", stream::Split::duplicate(),
                            std::move(forward_groups), Join::concatenate(pooled_widths)),
            Node::splitjoin(prefix_ + layer + ".bwd", stream::Split::round_robin(pooled_widths),
                            std::move(backward_groups), Join::sum())};
  }

  Node loss() { return placed(loss_ = make_loss_actor(prefix_, plan_, flow_, copy_)); }
  Node gather() { return placed(make_gather_actor(prefix_, plan_, flow_, copy_)); }
  // This copy's loss actor, once loss() has built it.
  const std::shared_ptr<stream::Actor>& loss_actor() const { return loss_; }

 private:
  const ModelSpec& spec() const { return model_spec(plan_.model); }
  // The actors placed from now on compute `layer` (a name of timed_layer_names).
  void time_layer(const std::string& layer) {
    const std::vector<std::string>& names = timed_layer_names(plan_.model);
    timed_layer_ = static_cast<int>(std::find(names.begin(), names.end(), layer) - names.begin());
    CNNBENCH_CHECK(timed_layer_ < static_cast<int>(names.size()),
                   "stream: layer " + layer + " is not one of the model's timed layers");
  }

  // Kernels [k.first, k.second) over input channels [c.first, c.second) of `full`: one block of
  // parameters, its forward and backward actors.
  void conv_block(std::vector<Node>& forward, std::vector<Node>& backward,
                  const std::string& layer, const std::string& block_name,
                  const Conv2dShape& full, std::pair<int, int> k, std::pair<int, int> c,
                  bool input_grad, bool all_channels) {
    const ParamTensor& weight = spec().tensor(layer + ".weight");
    const ParamTensor& bias = spec().tensor(layer + ".bias");
    const int R = full.kernel, C = full.in_channels;
    ConvBlockShape shape;
    shape.conv = full;
    shape.conv.batch = plan_.part;
    shape.conv.in_channels = c.second - c.first;
    shape.conv.out_channels = k.second - k.first;
    shape.owns_bias = c.first == 0;
    shape.input_grad = input_grad;
    shape.all_channels = all_channels;
    std::vector<ParamBlock::Run> runs;
    for (int kernel = k.first; kernel < k.second; ++kernel) {
      runs.push_back({weight.offset + (std::size_t(kernel) * C + c.first) * R * R,
                      std::size_t(c.second - c.first) * R * R});
    }
    if (shape.owns_bias) {
      runs.push_back({bias.offset + std::size_t(k.first), std::size_t(k.second - k.first)});
    }
    auto block = add_block(block_name, std::move(runs));
    const double flops = 2.0 * shape.out_elements() * (c.second - c.first) * R * R;
    add_pair(forward, backward, prefix_ + block_name, ConvLayer(shape), std::move(block), flops,
             (input_grad ? 2 : 1) * flops);
  }

  // A layer's forward and backward actors, placed together under `name` (with the copy's prefix)
  // and sharing what forward saves for backward.
  template <class Layer>
  void add_pair(std::vector<Node>& forward, std::vector<Node>& backward, const std::string& name,
                const Layer& layer, std::shared_ptr<ParamBlock> block, double forward_flops,
                double backward_flops) {
    auto saved = std::make_shared<Saved>(plan_.window);
    forward.push_back(
        place(std::make_shared<LayerActor<Layer, Direction::forward>>(name + ".fwd", layer, block,
                                                                     saved, plan_, flow_, copy_),
              name, forward_flops));
    backward.push_back(
        place(std::make_shared<LayerActor<Layer, Direction::backward>>(name + ".bwd", layer, block,
                                                                      saved, plan_, flow_, copy_),
              name, backward_flops));
  }

  std::shared_ptr<ParamBlock> add_block(const std::string& name,
                                        std::vector<ParamBlock::Run> runs) {
    if (copy_ > 0) {  // the first copy's block, met in the same order
      CNNBENCH_CHECK(next_block_ < out_.blocks.size() && out_.blocks[next_block_]->name() == name,
                     "stream: copy " + std::to_string(copy_) + " of the net differs at " + name);
      return out_.blocks[next_block_++];
    }
    out_.blocks.push_back(std::make_shared<ParamBlock>(name, std::move(runs), plan_));
    return out_.blocks.back();
  }

  // `key` already carries the copy's prefix. With at least one copy per core a copy is placed
  // whole: its actors pass every token to the next one in the same cache.
  Node place(std::shared_ptr<stream::Actor> actor, const std::string& key, double flops) const {
    actor->set_placement(whole_copy() ? prefix_ : key);
    actor->set_timing(TimeCategory::compute, timed_layer_);
    actor->set_work_estimate(guess_seconds(flops));
    return Node::filter(std::move(actor));
  }
  bool whole_copy() const { return plan_.sample_groups > 1 && plan_.sample_groups >= plan_.cores; }
  Node placed(std::shared_ptr<stream::Actor> actor) const {
    if (whole_copy()) actor->set_placement(prefix_);
    return Node::filter(std::move(actor));
  }

  const TrainingPlan& plan_;
  FlowTable& flow_;
  TrainingGraph& out_;
  int copy_;
  std::string prefix_;
  std::size_t next_block_ = 0;
  int timed_layer_ = -1;
  std::shared_ptr<stream::Actor> loss_;
};

// One copy of the net: forward layers, the loss, backward layers; its loss actor in `loss`.
std::vector<Node> build_copy(const TrainingPlan& plan, FlowTable& flow, const LayerWidths& widths,
                             TrainingGraph& graph, int copy, std::shared_ptr<stream::Actor>& loss) {
  Builder builder(plan, flow, graph, copy);
  std::vector<Node> forward, backward;
  auto add = [&](std::pair<Node, Node> layer) {
    forward.push_back(std::move(layer.first));
    backward.insert(backward.begin(), std::move(layer.second));
  };
  if (plan.model == ModelKind::fc3) {
    add(builder.dense("f1", 784, 300, true, false, widths.f1_blocks));
    add(builder.dense("f2", 300, 100, true, true, widths.f2_blocks));
    add(builder.dense("f3", 100, 10, false, true, widths.f3_blocks));
  } else {
    const int n = plan.part;
    add(builder.conv("c1", Conv2dShape{n, 1, 28, 28, 6, 5, 2}, false, widths.c1_kernel_groups,
                     widths.c1_channel_groups));
    add(builder.conv("c2", Conv2dShape{n, 6, 14, 14, 16, 5, 0}, true, widths.c2_kernel_groups,
                     widths.c2_channel_groups));
    add(builder.dense("f1", 400, 120, true, true, widths.f1_blocks));
    add(builder.dense("f2", 120, 84, true, true, widths.f2_blocks));
    add(builder.dense("f3", 84, 10, false, true, widths.f3_blocks));
  }
  std::vector<Node> stages;
  if (plan.sample_groups > 1) stages.push_back(builder.gather());
  for (Node& node : forward) stages.push_back(std::move(node));
  stages.push_back(builder.loss());
  for (Node& node : backward) stages.push_back(std::move(node));
  loss = builder.loss_actor();
  return stages;
}

void check_widths(const TrainingPlan& plan, int copies) {
  CNNBENCH_CHECK(copies >= 1 && plan.micro_batch % copies == 0,
                 "--widths s=" + std::to_string(copies) + ": must divide the micro-batch of " +
                     std::to_string(plan.micro_batch) + " samples");
  CNNBENCH_CHECK(copies == 1 || plan.consistency != Consistency::async,
                 "--widths s=" + std::to_string(copies) +
                     ": --consistency async updates weights while other copies read them; use "
                     "strict or group-async, or s=1");
  CNNBENCH_CHECK(plan.slow_copy < copies,
                 "--slowdown " + std::to_string(plan.slow_copy) + ":...: there is no copy " +
                     std::to_string(plan.slow_copy) + " in a net of " + std::to_string(copies) +
                     " copies (--widths s=N)");
}

}  // namespace

// With sample fission the copies form a splitjoin: the source's micro-batch numbers go to every
// copy (duplicate split), whose gather actor fetches its slice of the images; the copies end in
// the first layer's backward, which pushes nothing, so the join only counts their micro-batches
// in. The window is the feedback edge's initial credits: the source emits a micro-batch per
// credit, the sink returns M per finished step. strict (window M) so drains between groups and
// group-async and async (2M) let the next group overlap the unfinished one.
TrainingGraph build_training_graph(TrainingPlan& plan, FlowTable& flow, const LayerWidths& widths) {
  const int copies = widths.sample_groups;
  check_widths(plan, copies);
  plan.sample_groups = copies;
  // Dynamic balancing may give a copy all but one sample per other copy.
  plan.part = plan.balance_dynamic ? plan.micro_batch - (copies - 1) : plan.micro_batch / copies;
  flow = FlowTable(plan);
  TrainingGraph graph;
  graph.source = std::make_shared<SourceActor>(plan, flow);
  auto sink = std::make_shared<SinkActor>(plan);
  std::vector<std::shared_ptr<stream::Actor>> losses(static_cast<std::size_t>(copies));
  std::vector<Node> stages;
  stages.push_back(Node::filter(graph.source));
  if (copies == 1) {
    for (Node& node : build_copy(plan, flow, widths, graph, 0, losses[0])) {
      stages.push_back(std::move(node));
    }
  } else {
    std::vector<Node> branches;
    for (int c = 0; c < copies; ++c) {
      std::vector<Node> copy = build_copy(plan, flow, widths, graph, c, losses[std::size_t(c)]);
      branches.push_back(Node::pipeline("s" + std::to_string(c), std::move(copy)));
    }
    stages.push_back(Node::splitjoin("samples", stream::Split::duplicate(), std::move(branches),
                                     Join::concatenate()));
  }
  stages.push_back(Node::filter(sink));
  graph.root = Node::pipeline(model_name(plan.model), std::move(stages));
  for (int c = 0; c < copies; ++c) {
    graph.links.push_back(stream::Link::forward(losses[std::size_t(c)], 1, sink, 1 + c));
  }
  graph.links.push_back(stream::Link::back(sink, 0, graph.source, 0, plan.window));
  return graph;
}

}  // namespace cnnbench
