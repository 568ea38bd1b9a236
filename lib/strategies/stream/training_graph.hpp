// FC-3 and LeNet-5 as stream graphs: a source of micro-batches, forward layers expanded by
// splitjoins into parameter blocks, the loss actor, backward layers, and a sink that ends a step;
// a link carries each copy's loss to the sink, and a feedback edge the sink's credits back to the
// source. The parts: cnnbench/stream_options.hpp (the shape choices), training_run.hpp (the plan
// and the flow-control table), param_block.hpp, actors.hpp, and builder.cpp, which wires them.
#pragma once

#include <memory>
#include <vector>

#include "actors.hpp"
#include "cnnbench/stream.hpp"
#include "cnnbench/stream_options.hpp"
#include "param_block.hpp"
#include "training_run.hpp"

namespace cnnbench {

struct TrainingGraph {
  stream::Node root;
  std::vector<stream::Link> links;  // flatten(root, links)
  std::vector<std::shared_ptr<ParamBlock>> blocks;
  std::shared_ptr<SourceActor> source;
};
// Settles the plan's copies (sample_groups, part) from `widths`, resets `flow` to equal shares
// and builds the graph; Error naming --widths, --consistency or --slowdown when they don't fit.
// The graph's actors keep references to `plan` and `flow`.
TrainingGraph build_training_graph(TrainingPlan& plan, FlowTable& flow, const LayerWidths& widths);

}  // namespace cnnbench
