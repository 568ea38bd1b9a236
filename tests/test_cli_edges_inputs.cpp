// Edge cases of the input rules: every number, list, name and flag a user can get wrong, with the
// exit code and message each must give, and nothing written (tests/cli_edges.hpp runs the rows).
#include <vector>

#include "cli_edges.hpp"

namespace {

using cnnbench::test::Edge;

const std::vector<Edge> kInputEdges = {
    {"BatchZero", "train --batch 0", 2, "--batch"},
    {"UnknownModel", "train --model vgg16", 2, "vgg16"},
    {"NegativeLearningRate", "train --lr -1", 2, "--lr"},
    {"UnknownStrategyIsRuntime", "train --synthetic 100 --strategy quantum --quiet", 1,
     "unknown strategy 'quantum'"},
};

}  // namespace

CNNBENCH_EDGE_TABLE(InputEdges, kInputEdges);
