// Edge cases of `cnnbench tune`: the flags it refuses (exit 2, the option named), the nodes it
// does not plan, the output rule and an existing report (tests/cli_edges.hpp runs the rows).
#include <string>
#include <vector>

#include "cli_edges.hpp"

namespace {

using cnnbench::test::Edge;

const std::string tune = "tune --model fc3 --cores 1 --out {dir}/t.json";

// A tune report as `cnnbench tune` writes it, of what sweep --tuned reads: FC-3 on `cores`
// cores, whose stream winner splits f1 in two and whose cluster winner is the default. `extra`
// replaces the config's tail (a field added or changed). The setup shell that writes it as tune.json.
std::string tune_report(int cores = 1, const std::string& extra = "", const std::string& winner_options =
                        R"({"widths": "f1=2,f2=1"})", const std::string& model = "fc3") {
  const std::string text =
      R"({"schema_version": 1, "kind": "tune", "interrupted": false, "context": {"date": "2026-12-07T17:00:00Z"},)"
      R"( "config": {"model": ")" + model + R"(", "cores": )" + std::to_string(cores) +
      R"(, "nodes": 1, "batch": 64)" + extra + R"(}, "measured": [],)"
      R"( "winners": {"stream": {"id": "fc3/stream/n1c1/t2", "label": "f1=2 f2=1", "options": )" + winner_options +
      R"(, "cores": 1, "nodes": 1, "default": false, "speedup": 1.1, "default_speedup": 1.0},)"
      R"( "cluster": {"id": "fc3/cluster/n1c1/t1", "label": "1x1 replicas dynamic", "options": {},)"
      R"( "cores": 1, "nodes": 1, "default": true, "speedup": 1.0, "default_speedup": 1.0}, "blas": null}})";
  return "printf '%s' '" + text + "' > tune.json";
}

// Shell that passes when out.json follows results/schema/NAME.schema.json (or, without
// python3-jsonschema, when the schema cannot be checked here).
std::string schema_valid(const std::string& name) {
  const std::string schema = std::string(CNNBENCH_SOURCE_DIR) + "/results/schema/" + name + ".schema.json";
  return "{ ! /usr/bin/python3 -c 'import jsonschema' 2>/dev/null || /usr/bin/python3 -c \"import json, jsonschema; "
         "jsonschema.validate(json.load(open('out.json')), json.load(open('" + schema + "')))\"; }";
}

const std::string tuned_sweep =
    "sweep --model fc3 --strategies serial,stream --cores 1 --steps 2 --repeat 1 --warmup 0 "
    "--synthetic 128 --tuned {dir}/tune.json --out {dir}/out.json";

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
    // sweep --tuned: the winner runs beside its default in the same rounds, with its own options,
    // and is a line of its own; a default winner marks its point.
    {"SweepTunedRunsTheWinnerBesideItsDefault", tuned_sweep, 0,
     "tuned fc3/stream/n1c1/tuned: f1=2 f2=1, speedup", {"out.json", "tune.json"}, tune_report(), false, "",
     "python3 -c \"import json; r = json.load(open('out.json')); p = r['points']; "
     "ids = [x['id'] for x in p]; assert ids == ['fc3/serial/n1c1', 'fc3/stream/n1c1', 'fc3/stream/n1c1/tuned'], ids; "
     "t = p[2]; assert t['options'] == {'widths': 'f1=2,f2=1'} and t['series'] == 'stream/tuned', t; "
     "assert t['tuned']['default_point'] == 'fc3/stream/n1c1' and t['tuned']['default'] is False, t; "
     "assert 'tuned' not in p[1] and 'options' not in p[1], p[1]; "
     "assert [x['strategy_metrics']['widths']['f1_blocks'] for x in p[1:]] == [1, 2], 'the winner ran its own widths'; "
     "assert [x['model'] for x in r['config']['tuned']] == ['fc3'], r['config']\" && " + schema_valid("sweep-report")},
    {"SweepTunedDefaultWinnerMarksItsPoint",
     "sweep --model fc3 --strategies serial,cluster --cores 1 --nodes 1 --steps 2 --repeat 1 --warmup 0 "
     "--synthetic 128 --tuned {dir}/tune.json --out {dir}/out.json",
     0, "tuned fc3/cluster/n1c1: the default (1x1 replicas dynamic) is the tune's winner", {"out.json", "tune.json"},
     tune_report(), false, "",
     "python3 -c \"import json; p = json.load(open('out.json'))['points']; "
     "assert [x['id'] for x in p] == ['fc3/serial/n1c1', 'fc3/cluster/n1c1'], p; assert p[1]['tuned']['default'] is True\""},
    {"SweepTunedOtherBatch", tuned_sweep + " --batch 32", 1,
     "tune.json: tuned at --batch 64 but the sweep runs --batch 32", {"tune.json"}, tune_report()},
    {"SweepTunedCoresNotSwept", tuned_sweep, 1,
     "the sweep has no point fc3/stream/n1c2 to measure the tuned stream beside (its default); add 2 to --cores",
     {"tune.json"}, tune_report(2)},
    {"SweepTunedModelNotSwept", tuned_sweep, 1, "tune.json: a tune of lenet5, which --model does not include",
     {"tune.json"}, tune_report(1, "", R"({})", "lenet5")},
    {"SweepTunedTwice", tuned_sweep + " --tuned {dir}/tune.json", 1, "a second tune of fc3 on 1 core",
     {"tune.json"}, tune_report()},
    {"SweepTunedOverOtherHosts", tuned_sweep, 1,
     "tuned over 2 emulated hosts at 1gbit; run the sweep over 2 emulated hosts at 1gbit too (--emulate-hosts 2 --rate 1gbit)",
     {"tune.json"}, tune_report(1, R"(, "network": {"emulated_hosts": 2, "rate": "1gbit", "subnet": "10.0.0.0/24"})")},
    {"SweepTunedOptionNotText", tuned_sweep, 1,
     "tune.json: field winners.stream.options.widths: expected a string, found 2", {"tune.json"},
     tune_report(1, "", R"({"widths": 2})")},
    {"SweepTunedNotATune", tuned_sweep, 1, R"(tune.json: field kind: expected "tune" (a report of cnnbench tune), found "sweep")",
     {"tune.json"}, R"(printf '{"schema_version": 1, "kind": "sweep"}' > tune.json)"},
    {"SweepTunedInterrupted", tuned_sweep, 1, "tune.json: the tune was interrupted before it measured its candidates",
     {"tune.json"}, R"(printf '{"schema_version": 1, "kind": "tune", "interrupted": true}' > tune.json)"},
    {"SweepTunedNotJson", tuned_sweep, 1, "tune.json: at byte 0: expected valid JSON", {"tune.json"},
     "printf 'winners' > tune.json"},
    {"SweepTunedMissing", tuned_sweep, 2, "--tuned", {}},
};

}  // namespace

CNNBENCH_EDGE_TABLE(TuneEdges, kTuneEdges);
