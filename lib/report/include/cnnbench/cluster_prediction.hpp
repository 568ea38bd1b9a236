// Each measured cluster point of a sweep held against the communication model
// (cnnbench/collective_model.hpp): the step it predicts from the sweep's own allreduce
// measurement, next to the step measured.
#pragma once

#include "cnnbench/collective_model.hpp"
#include "cnnbench/records.hpp"

namespace cnnbench {

// Sets `prediction` of every measured cluster point with more than one node and one thread per
// rank: {predicted_step_s, measured_step_s, relative_error ((predicted - measured) / measured),
// algorithm (the one run for its largest allreduce), algorithm_rule, hidden_fraction, profile}.
// The step is serial step / nodes + (1 - hidden) x each of the point's allreduces
// (strategy_metrics.allreduce.schedule_bytes) by the algorithm libnbc runs for the strategy's
// in-place MPI_Iallreduce, priced with the link of the sweep's allreduce-bench fit. Points stay
// without one when the sweep has no serial point or no fit.
void add_cluster_predictions(SweepRecord& sweep);

// The MPI_Iallreduce algorithm a cluster run's libnbc was asked for, from its strategy_metrics
// (allreduce.iallreduce_algorithm_id; open_mpi_default when absent or null). Error for an id
// libnbc does not have.
AllreduceAlgorithm iallreduce_asked(const nlohmann::json& strategy_metrics);

}  // namespace cnnbench
