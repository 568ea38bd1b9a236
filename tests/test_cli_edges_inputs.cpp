// Edge cases of the input rules: every number, list, name and flag a user can get wrong, with the
// exit code and message each must give, and nothing written (tests/cli_edges.hpp runs the rows).
#include <string>
#include <vector>

#include "cli_edges.hpp"
#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"

namespace {

using cnnbench::test::Edge;

const std::vector<Edge> kInputEdges = {
    {"BatchZero", "train --batch 0", 2, "--batch"},
    // Usage errors read like every other error, and say which command's help to read.
    {"UsageErrorSaysError", "train --lr 0", 2,
     "cnnbench: error: --lr: 0: expected a finite number > 0\nRun 'cnnbench train --help'"},
    {"UnknownCommandSaysError", "trian", 2, "cnnbench: error: unknown command 'trian'"},
    {"UnknownModel", "train --model vgg16", 2, "vgg16"},
    {"NegativeLearningRate", "train --lr -1", 2, "--lr"},
    {"UnknownStrategyIsRuntime", "train --synthetic 100 --strategy quantum --quiet", 1,
     "unknown strategy 'quantum'"},

    // Numbers: finite, in range, said for people (never DBL_MAX's 309 digits).
    {"TrainNanLearningRate", "train --lr nan --synthetic 256 --steps 1 --quiet", 2,
     "nan: expected a finite number > 0"},
    {"SweepInfLearningRate", "sweep --lr inf --out {dir}/r.json", 2, "inf: expected a finite number > 0"},
    {"TrainLearningRateBeyondFloat", "train --lr 1e39 --synthetic 256 --steps 1 --quiet", 2,
     "1e39: expected a finite number > 0"},
    {"SweepLearningRateBeyondDouble", "sweep --lr 1e309 --out {dir}/r.json", 2,
     "expected a finite number > 0", {}, {}, false, "17976931348623"},
    {"NegativeNumberWithoutDblMax", "train --weight-decay -1", 2, "expected a finite number >= 0",
     {}, {}, false, "17976931348623"},
    {"TrainMomentumAboveOne", "train --momentum 2", 2, "2: expected a finite number in [0, 1]"},
    {"SweepMomentumNan", "sweep --momentum nan", 2, "nan: expected a finite number in [0, 1]"},
    {"TrainNegativeSeed", "train --seed -1 --synthetic 256 --steps 1 --quiet", 2,
     "-1: expected a whole number >= 0"},
    {"SweepNegativeSeed", "sweep --seed -1 --out {dir}/r.json", 2, "-1: expected a whole number >= 0"},
    {"TrainSeedBeyond64Bits", "train --seed 99999999999999999999999", 2,
     "expected a whole number >= 0 (at most 18446744073709551615)"},
    {"TrainNegativeSteps", "train --steps -3", 2, "-3: expected a whole number >= 1"},
    {"SweepZeroEpochs", "sweep --epochs 0", 2, "0: expected a whole number >= 1"},
    {"SweepTargetAccuracyZero", "sweep --target-accuracy 0", 2, "in (0, 1]"},

    // Threads: at most one per sample of the batch; at most the machine's unless --oversubscribe.
    {"TrainThreadsAboveBatch", "train --threads 100 --batch 64 --oversubscribe --synthetic 256", 2,
     "--threads 100: more than the 64 samples of a batch"},
    {"SweepCoresAboveBatch", "sweep --cores 100 --batch 64 --oversubscribe --out {dir}/r.json", 2,
     "--cores 100: more than the 64 samples of a batch"},
    {"TrainCoresAboveMachine", "train --strategy stream --cores 4096 --batch 8192 --synthetic 256", 2,
     "hardware threads; pass --oversubscribe"},
    {"SweepCoresAboveMachine", "sweep --cores 4096 --batch 8192 --out {dir}/r.json", 2,
     "hardware threads; pass --oversubscribe"},
    {"TrainOversubscribed", "train --model fc3 --strategy blas --threads 3 --oversubscribe "
     "--synthetic 256 --steps 1 --quiet", 0, ""},
    {"SweepOversubscribed", "sweep --model fc3 --strategies blas --cores 3 --nodes 1 --oversubscribe "
     "--steps 2 --repeat 1 --warmup 0 --synthetic 256 --quiet --out {dir}/r.json", 0, "",
     {"r.json"}},

    // Lists: a repeated item is measured once, with a note.
    {"SweepRepeatedModel", "sweep --model fc3,fc3 --strategies serial,serial --cores 1 --steps 2 "
     "--repeat 1 --warmup 0 --synthetic 256 --quiet --out {dir}/r.json", 0,
     "--model lists fc3 more than once", {"r.json"}},

    // Typos: what was meant.
    {"MistypedCommand", "trian --steps 2", 2, "unknown command 'trian'; did you mean 'train'?"},
    {"MistypedSweep", "swep", 2, "did you mean 'sweep'?"},
    {"TrainMistypedFlag", "train --lrr 0.1", 2, "unknown option '--lrr'; did you mean '--lr'?"},
    {"SweepMistypedFlag", "sweep --repaet 2", 2, "unknown option '--repaet'; did you mean '--repeat'?"},

    // Options of another strategy: refused by train and sweep alike.
    {"TrainOptionOfAnotherStrategy", "train --synthetic 256 --steps 1 --consistency async --quiet", 1,
     "it is an option of stream"},
    {"SweepOptionOfAnotherStrategy", "sweep --strategies serial,blas --consistency async --steps 2 "
     "--repeat 1 --synthetic 256 --out {dir}/r.json", 1, "it is an option of stream"},
    {"SweepOptionItDoesNotPassOn", "sweep --overlap off", 2,
     "'--overlap' (an option of cluster that this command does not take)"},

    // Resuming with other settings continues, and says what changed.
    {"ResumeWithOtherLearningRate",
     "train --model fc3 --synthetic 256 --steps 2 --resume ck.safetensors --lr 0.05 --quiet", 0,
     "the checkpoint was trained with --lr 0.01, this run uses --lr 0.05", {"ck.safetensors"},
     "{cli} train --model fc3 --synthetic 256 --steps 1 --save ck.safetensors --quiet"},
    {"ResumeWithOtherData",
     "train --model fc3 --synthetic 512 --steps 2 --resume ck.safetensors --quiet", 0,
     "trained on synthetic(256, seed 1), this run trains on synthetic(512, seed 1)",
     {"ck.safetensors"},
     "{cli} train --model fc3 --synthetic 256 --steps 1 --save ck.safetensors --quiet"},

    // What the build is, and the shell's and man's view of the same flags.
    {"VersionNamesRevision", "--version", 0, "\ngit "},
    {"VersionNamesTargetsAndParts", "--version", 0, "SIMD targets"},
    {"CompletionBashHasTrain", "completion bash", 0, "train)"},
    {"CompletionBashHasStrategy", "completion bash", 0, "--strategy) COMPREPLY"},
    {"CompletionZshHasChoices", "completion zsh", 0, ":(strict group-async async)"},
    {"CompletionUnknownShell", "completion fish", 2, "fish"},
    {"ManPage", "man", 0, ".TH CNNBENCH 1"},

    // info and allreduce-bench follow the same rules.
    {"InfoMistypedFlag", "info --jsn", 2, "did you mean '--json'?"},
    {"InfoJson", "info --json", 0, "\"simd\""},
    {"InfoUnknownIsa", "info --isa bogus", 2, "unknown SIMD target 'bogus'"},
    {"AllreduceBenchNotANumber", "allreduce-bench --min-bytes x", 2, "--min-bytes"},

    // Paths of the wrong kind: each its own message, naming the flag and the path.
    {"TrainDataIsAFile", "train --data f --steps 1", 2, "--data: f: is a file; expected a folder",
     {"f"}, "touch f"},
    {"SweepDataIsAFile", "sweep --data f --out {dir}/r.json", 2, "f: is a file; expected a folder",
     {"f"}, "touch f"},
    {"TrainResumeIsAFolder", "train --model fc3 --synthetic 64 --steps 1 --resume d", 2,
     "--resume: d: is a folder; expected a file", {"d/"}, "mkdir d"},
    {"TrainInitIsAFolder", "train --model fc3 --synthetic 64 --steps 1 --init d", 2,
     "--init: d: is a folder; expected a file", {"d/"}, "mkdir d"},
    {"TrainInitMissing", "train --model fc3 --synthetic 64 --steps 1 --init none.st", 2,
     "--init: none.st: no such file"},
    {"SweepHostfileIsAFolder", "sweep --hostfile d --out {dir}/r.json", 2,
     "--hostfile: d: is a folder; expected a file", {"d/"}, "mkdir d"},
    {"PlotScriptIsAFolder", "plot r.json --script d", 2, "--script: d: is a folder; expected a file",
     {"d/"}, "mkdir d"},
    // Sizes from user values are checked before anything is allocated: never std::bad_alloc.
    {"TrainSyntheticBeyondMemory", "train --synthetic 1000000000 --steps 1", 2,
     "--synthetic 1000000000 needs 785.0 GB for the images; this machine has"},
    {"SweepSyntheticBeyondMemory", "sweep --synthetic 1000000000 --out {dir}/r.json", 2,
     "--synthetic 1000000000 needs 785.0 GB for the images"},
    {"TrainBatchBeyondMemory", "train --batch 1048576 --synthetic 64 --steps 1", 2,
     "--batch 1048576 with lenet5/serial/n1c1 needs"},
    {"TrainBatchAboveTheData", "train --model fc3 --synthetic 10 --batch 64 --steps 1", 2,
     "is smaller than one batch of 64"},
    // Bytes a terminal must not get raw: a control byte in a value, an invalid one in a file name.
    {"ControlByteInValueIsEscaped", "train --model \"$(printf 'x\\033[2J')\"", 2, "x\\x1b[2J"},
    {"InvalidByteInFileNameIsEscaped", "compare \"$(printf 'r\\377.json')\" r.json", 1,
     "r\\xff.json: cannot open"},

    // Environment variables: checked as their flags are, named in the message; the flag wins;
    // a command that does not read the variable ignores it.
    {"IsaVariableUnknownInfo", "info", 2, "CNNBENCH_ISA=bogus: unknown SIMD target 'bogus'", {},
     "export CNNBENCH_ISA=bogus"},
    {"IsaVariableUnknownTrain", "train --model fc3 --synthetic 64 --steps 1 --quiet", 2,
     "CNNBENCH_ISA=bogus: unknown SIMD target", {}, "export CNNBENCH_ISA=bogus"},
    {"IsaVariableUnknownSweep", "sweep --out {dir}/r.json", 2, "CNNBENCH_ISA=bogus", {},
     "export CNNBENCH_ISA=bogus"},
    {"IsaFlagOverridesVariable", "train --isa best --model fc3 --synthetic 64 --steps 1 --quiet", 0,
     "", {}, "export CNNBENCH_ISA=bogus"},
    {"IsaVariableIgnoredByCompletion", "completion bash", 0, "train)", {}, "export CNNBENCH_ISA=bogus"},
    {"PlotScriptVariableMissing", "plot s.json --out img", 2,
     "CNNBENCH_PLOT_SCRIPT=/nonexistent/plot.py: no such file", {"s.json"},
     std::string("export CNNBENCH_PLOT_SCRIPT=/nonexistent/plot.py && cp '") + CNNBENCH_SOURCE_DIR +
         "/fuzz/corpus/report/sweep_small.json' s.json"},
    {"PlotScriptFlagOverridesVariable", "plot s.json --script d --out img", 2, "--script: d: is a folder",
     {"d/"}, "export CNNBENCH_PLOT_SCRIPT=/nonexistent/plot.py && mkdir d", false, "CNNBENCH_PLOT_SCRIPT"},
    {"ColumnsVariableNotAWidth", "train --model fc3 --synthetic 64 --steps 1 --progress bar", 2,
     "COLUMNS=wide: expected a whole number >= 1", {}, "export COLUMNS=wide"},
    {"ColumnsVariableIgnoredWithoutABar", "train --model fc3 --synthetic 64 --steps 1 --quiet", 0, "",
     {}, "export COLUMNS=wide"},
    // A terminal narrower than 20 columns gets lines, not a bar that wraps.
    {"NarrowTerminalGetsLines", "train --model fc3 --synthetic 64 --steps 1 --progress bar", 0,
     "step 1/1 (100%)", {}, "export COLUMNS=15"},

    // Degenerate runs: zero steps is a range error, resumed or not.
    {"TrainZeroSteps", "train --model fc3 --synthetic 64 --steps 0", 2, "--steps: 0: expected a whole number >= 1"},
    {"TrainZeroEpochs", "train --model fc3 --synthetic 64 --epochs 0", 2, "--epochs: 0: expected a whole number >= 1"},
    // Writing the starting weights is its own flag, not a run of zero steps.
    {"SaveInitWritesTheStartingWeights", "train --model fc3 --synthetic 64 --save-init i.st", 0,
     "initial weights written to i.st", {"i.st"}},
    {"SaveInitIsNoTrainingRun", "train --model fc3 --synthetic 64 --save-init i.st --steps 3", 2,
     "--steps excludes --save-init"},
    {"ResumeWithNothingLeft", "train --model fc3 --synthetic 256 --steps 2 --resume ck.st --quiet", 2,
     "--resume ck.st: the checkpoint is already at step 2 and --steps 2 asks for 2 in all: nothing "
     "left to train", {"ck.st"}, "{cli} train --model fc3 --synthetic 256 --steps 2 --save ck.st --quiet"},
    {"ResumePastTheEnd", "train --model fc3 --synthetic 256 --steps 1 --resume ck.st --quiet", 2,
     "nothing left to train (pass a larger --steps)", {"ck.st"},
     "{cli} train --model fc3 --synthetic 256 --steps 2 --save ck.st --quiet"},
    {"ResumeEpochsWithNothingLeft", "train --model fc3 --synthetic 256 --epochs 1 --resume ck.st --quiet", 2,
     "--epochs 1 asks for 4 in all: nothing left to train (pass a larger --epochs)", {"ck.st"},
     "{cli} train --model fc3 --synthetic 256 --epochs 1 --save ck.st --quiet"},
    // A loss that is not finite stops the run at that step, whatever the strategy: exit 1, the
    // report says diverged and where, no speed, no checkpoint.
    {"DivergedSerial", "train --model fc3 --synthetic 256 --steps 6 --lr 1e30 --report r.json --quiet", 1,
     "cnnbench: error: fc3 serial: diverged at step 2 (loss nan); try a smaller --lr", {"r.json"}, "",
     false, "img/s",
     "python3 -c \"import json; r = json.load(open('r.json')); assert r['status'] == 'diverged' and "
     "r['diverged_at_step'] == 2 and r['reason'].startswith('diverged at step 2'), r\""},
    {"DivergedBlas", "train --model fc3 --strategy blas --synthetic 256 --steps 6 --lr 1e30 --quiet", 1,
     "fc3 blas: diverged at step 2 (loss nan)"},
    {"DivergedStream", "train --model lenet5 --strategy stream --cores 2 --oversubscribe --synthetic 256 "
     "--steps 6 --lr 1e30 --quiet", 1, "lenet5 stream: diverged at step"},
#if CNNBENCH_HAVE_MPI
    {"DivergedCluster", "train --model fc3 --strategy cluster --synthetic 256 --steps 6 --lr 1e30 --quiet",
     1, "fc3 cluster: diverged at step 2 (loss nan)"},
#endif
    {"DivergedWritesNoCheckpoint", "train --model fc3 --synthetic 256 --steps 6 --lr 1e30 --save c.st --quiet",
     1, "(no checkpoint written: the weights are not finite)", {}},
    {"SweepMarksDivergedPoints",
     "sweep --model fc3 --strategies serial,blas --cores 1 --lr 1e30 --steps 3 --repeat 1 --warmup 0 "
     "--synthetic 128 --quiet --out {dir}/s.json", 1, "", {"s.json"}, "", false, "",
     "python3 -c \"import json; s = json.load(open('s.json')); p = s['points']; assert len(p) == 2 and "
     "all(x['status'] == 'diverged' and x.get('speedup') is None and 'diverged at step 2' in x['reason'] "
     "for x in p), p; assert not s['complete']\""},

    // Consistency: a repeated key keeps the first, with a note, as a repeated list item does.
    {"WidthsRepeatedKeyKeepsTheFirst", "train --model lenet5 --strategy stream --cores 2 --oversubscribe "
     "--widths c1k=2,c1k=3 --synthetic 128 --steps 1 --quiet --report r.json", 0,
     "cnnbench: note: --widths names a key more than once; the first is used, not c1k=3", {"r.json"},
     "", false, "", "grep -q '\"widths\": \"c1k=2\"' r.json"},
    {"TrainRepeatedFlag", "train --lr 0.1 --lr 0.2", 2, "--lr is given 2 times; give it once"},
    {"SweepRepeatedCores", "sweep --model fc3 --strategies serial --cores 1,1 --steps 1 --repeat 1 "
     "--warmup 0 --synthetic 64 --quiet --out {dir}/r.json", 0, "--cores lists 1 more than once",
     {"r.json"}},
    // A bad value exits 2 in every command.
    {"CompareAlphaOutOfRange", "compare a.json b.json --alpha 0.9", 2, "--alpha"},
    {"TrainTraceStepsZero", "train --trace t.json --trace-steps 0", 2, "--trace-steps"},
    {"AllreduceBenchMinAboveMax", "allreduce-bench --min-bytes 64 --max-bytes 8", 2,
     "--min-bytes 64 is above --max-bytes 8"},
    {"AllreduceBenchNegativeRepetitions", "allreduce-bench --repetitions -1", 2, "--repetitions"},
    // A fit needs a third size to say anything about its error: one or two are refused.
    {"AllreduceBenchOneSizeIsNoFit", "allreduce-bench --min-bytes 8 --max-bytes 12", 2,
     "one message size from 8 bytes, and the fit alpha + n*beta needs at least 3"},
    {"AllreduceBenchTwoSizesIsNoFit", "allreduce-bench --min-bytes 8 --max-bytes 16", 2,
     "two message sizes from 8 bytes, and the fit alpha + n*beta needs at least 3"},
    {"AllreduceBenchUnknownAlgorithm", "allreduce-bench --algorithm tree", 2, "--algorithm"},
    // Each MPI component has its own algorithms: libnbc no segmented ring, tuned no binomial.
    {"AllreduceBenchNonblockingSegmentedRing", "allreduce-bench --nonblocking --algorithm segmented_ring", 2,
     "--algorithm segmented_ring --nonblocking: MPI_Iallreduce (libnbc) has no segmented_ring algorithm "
     "(it has ring, binomial, rabenseifner, recursive_doubling)"},
    {"AllreduceBenchBlockingBinomial", "allreduce-bench --algorithm binomial", 2, "add --nonblocking"},
};

}  // namespace

CNNBENCH_EDGE_TABLE(InputEdges, kInputEdges);

// The check every error row gets: it finds what it is there to find, and passes clean text.
TEST(ErrorRowCheck, FindsLibraryTextAndRawBytes) {
  using cnnbench::test::leaked_internals;
  EXPECT_EQ(leaked_internals("cnnbench: error: r.json: cannot open\n\tcafé …\n"), "");
  EXPECT_NE(leaked_internals("cnnbench: error: std::bad_alloc"), "");
  EXPECT_NE(leaked_internals("[json.exception.parse_error.101] parse error"), "");
  EXPECT_NE(leaked_internals("what(): x"), "");
  EXPECT_NE(leaked_internals("found 'ÿ' \xff"), "");
  EXPECT_NE(leaked_internals("x\x1b[2J"), "");
  EXPECT_NE(leaked_internals(std::string("nul\0byte", 8)), "");
}

// What the error exit writes instead of raw bytes; float settings as every report stores them.
TEST(ErrorRowCheck, PrintableTextEscapesWhatATerminalMustNotGet) {
  EXPECT_EQ(cnnbench::printable_text("r\xff.json\x1b[2J\ncafé\t"), "r\\xff.json\\x1b[2J\ncafé\t");
  EXPECT_EQ(cnnbench::printable_text("\xc0\xaf"), "\\xc0\\xaf");  // an overlong '/'
  EXPECT_EQ(cnnbench::test::leaked_internals(cnnbench::printable_text("\x89PNG\r\n\x1a")), "");
  EXPECT_EQ(cnnbench::float_setting(0.01f), 0.01);
  EXPECT_EQ(cnnbench::float_setting(0.9f), 0.9);
}
