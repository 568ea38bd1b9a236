// Parsing --consistency and --widths, and the default widths: the paper's graph, or one copy of
// LeNet-5 per core (sample fission).
#include "cnnbench/stream_options.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"

namespace cnnbench {

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
  std::vector<std::string> seen;  // a repeated name keeps its first value, as the CLI says
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
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
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

}  // namespace cnnbench
