// The stream strategy's public pieces: its shape choices, the consistency mode and how many blocks
// each layer's splitjoins expand into (--widths), with the defaults per model and core count. The
// strategy builds its graph from them; the tuner's planner (lib/report) enumerates them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cnnbench/models.hpp"

namespace cnnbench {

// How weights and micro-batches stay in step (docs/stream.md, "Consistency modes").
enum class Consistency { strict, group_async, async };
Consistency parse_consistency(const std::string& name);  // Error naming --consistency
const char* consistency_name(Consistency consistency);

// How many blocks each layer's splitjoins expand into.
struct LayerWidths {
  int c1_kernel_groups = 1, c1_channel_groups = 1;
  int c2_kernel_groups = 1, c2_channel_groups = 1;
  int f1_blocks = 1, f2_blocks = 1, f3_blocks = 1;
  int sample_groups = 1;  // copies of the whole net, each on a slice of every micro-batch
};
// The report's "widths": {"c1_kernel_groups": ..., ..., "sample_groups": ...}.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LayerWidths, c1_kernel_groups, c1_channel_groups,
                                   c2_kernel_groups, c2_channel_groups, f1_blocks, f2_blocks,
                                   f3_blocks, sample_groups)
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

}  // namespace cnnbench
