// Edge cases of the input rules: every number, list, name and flag a user can get wrong, with the
// exit code and message each must give, and nothing written (tests/cli_edges.hpp runs the rows).
#include <vector>

#include "cli_edges.hpp"

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
    {"TrainNegativeSteps", "train --steps -3", 2, "-3: expected a whole number >= 0"},
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
    {"AllreduceBenchNotANumber", "allreduce-bench --min-bytes x", 2, "--min-bytes"},
};

}  // namespace

CNNBENCH_EDGE_TABLE(InputEdges, kInputEdges);
