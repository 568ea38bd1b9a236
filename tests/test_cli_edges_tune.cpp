// Edge cases of `cnnbench tune`: the flags it refuses (exit 2, the option named), the nodes it
// does not plan, the output rule and an existing report (tests/cli_edges.hpp runs the rows).
#include <string>
#include <vector>

#include "cli_edges.hpp"

namespace {

using cnnbench::test::Edge;

const std::string tune = "tune --model fc3 --cores 1 --out {dir}/t.json";

const std::vector<Edge> kTuneEdges = {
    {"TuneNeedsModel", "tune --cores 1 --out {dir}/t.json", 2, "--model is required"},
    {"TuneNeedsCores", "tune --model fc3 --out {dir}/t.json", 2, "--cores is required"},
    {"TuneUnknownModel", "tune --model vgg16 --cores 1", 2, "vgg16"},
    {"TuneZeroCores", "tune --model fc3 --cores 0", 2, "--cores: 0: expected a whole number in 1..4096"},
    {"TuneCoresAboveMachine", "tune --model fc3 --cores 4096 --batch 8192 --out {dir}/t.json", 2,
     "hardware threads; pass --oversubscribe"},
    {"TuneCoresAboveBatch", "tune --model fc3 --cores 100 --batch 64 --oversubscribe --out {dir}/t.json", 2,
     "--cores 100: more than the 64 samples of a batch"},
    {"TuneBudgetZero", tune + " --budget 0", 2, "--budget: 0: expected a finite number in (0, 604800]"},
    {"TuneBudgetNan", tune + " --budget nan", 2, "--budget: nan: expected a finite number"},
    {"TuneBudgetWords", tune + " --budget soon", 2, "--budget: soon: expected a finite number"},
    {"TuneExhaustiveHasNoBudget", tune + " --exhaustive --budget 60", 2, "--budget excludes --exhaustive"},
    {"TuneUnknownStrategy", tune + " --strategies stream,quantum", 2, "--strategies"},
    {"TuneSerialIsNoCandidate", tune + " --strategies serial", 2, "--strategies"},
    {"TuneSeveralNodes", tune + " --nodes 2", 2, "--nodes: 2: tune measures one node (or emulated hosts"},
    {"TuneZeroRepeat", tune + " --repeat 0", 2, "--repeat: 0: expected a whole number in 1..1000"},
    // Emulated hosts: the cluster only, one rank a host, their own mpirun, a rate tc takes.
    {"TuneRateNeedsHosts", tune + " --rate 1gbit", 2, "--rate: caps the links of --emulate-hosts"},
    {"TuneOneHost", tune + " --emulate-hosts 1", 2, "--emulate-hosts"},
    {"TuneHostsStream", tune + " --emulate-hosts 2 --strategies stream", 2,
     "--strategies: stream runs on one node; over --emulate-hosts only cluster is tuned"},
    {"TuneHostsNodes", tune + " --emulate-hosts 2 --nodes 4", 2, "--nodes: 4: the cluster over --emulate-hosts 2"},
    {"TuneHostsMpirun", tune + " --emulate-hosts 2 --mpirun mpiexec", 2, "--mpirun: does not go with --emulate-hosts"},
    {"TuneHostsBadRate", tune + " --emulate-hosts 2 --rate fast", 2, "--rate: 'fast' is not a rate"},
    {"TuneHostsAboveMachine", "tune --model fc3 --cores 4096 --batch 65536 --emulate-hosts 2 --out {dir}/t.json", 2,
     "hardware threads; pass --oversubscribe"},
    {"TuneNoSteps", tune + " --steps 10", 2, "--steps"},
    // The output rule, as every command checks it before any work.
    {"TuneOutIsAFolder", "tune --model fc3 --cores 1 --out {dir}/", 1, "is a folder; give a file name"},
    {"TuneRefusesToOverwrite", tune, 1, "t.json: already exists; pass --force to overwrite it", {"t.json"}, "printf x > t.json"},
};

}  // namespace

CNNBENCH_EDGE_TABLE(TuneEdges, kTuneEdges);
