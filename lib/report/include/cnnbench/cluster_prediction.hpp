// Each measured cluster point of a sweep held against the communication model
// (cnnbench/collective_model.hpp): the step it predicts from the sweep's own allreduce
// measurement, next to the step measured.
#pragma once

#include "cnnbench/records.hpp"

namespace cnnbench {

// Sets `prediction` of every measured cluster point with more than one node and one thread per
// rank: {predicted_step_s, measured_step_s, relative_error ((predicted - measured) / measured),
// algorithm (the cheapest for its largest allreduce), hidden_fraction, profile}. The step is
// serial step / nodes + (1 - hidden) x the cheapest allreduce of each of the point's allreduces
// (strategy_metrics.allreduce.schedule_bytes), priced with the link of the sweep's
// allreduce-bench fit. Points stay without one when the sweep has no serial point or no fit.
void add_cluster_predictions(SweepRecord& sweep);

}  // namespace cnnbench
