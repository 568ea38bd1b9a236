// Edge cases of the outputs: every file a command writes (reports, checkpoints, sweep reports,
// plots) goes through one writer, so a device is written in place with its errors reported, a
// symlink and a file's mode are kept, missing folders are created, and a path that cannot be
// written is refused before any work (tests/cli_edges.hpp runs the rows).
#include <string>
#include <vector>

#include "cli_edges.hpp"

namespace {

using cnnbench::test::Edge;

// A run of a fraction of a second; `long_run` would take minutes, so a row that uses it shows
// that the output was refused before training.
const std::string run = "train --model fc3 --synthetic 128 --steps 1 --quiet ";
const std::string long_run = "train --model fc3 --synthetic 128 --steps 100000 --quiet ";
const std::string sweep =
    "sweep --model fc3 --strategies serial --cores 1 --repeat 1 --warmup 0 --steps 1 --synthetic 128 ";
const std::string sweep_report =
    std::string("cp '") + CNNBENCH_SOURCE_DIR + "/fuzz/corpus/report/sweep_small.json' s.json && chmod 0644 s.json";
// Waits (bounded) for the background reader of a FIFO to have written what it read.
const std::string fifo_read = "for i in $(seq 50); do grep -q '\"kind\": \"run\"' out && exit 0; sleep 0.1; done; exit 1";

const std::vector<Edge> kWriteEdges = {
    // Devices are written in place, and their errors are errors. As nobody: root would replace
    // /dev/full with a file if the write were not in place.
    {"ReportToDevFull", run + "--report /dev/full", 1, "No space left on device", {}, "", true},
    {"SaveToDevFull", run + "--save /dev/full", 1, "/dev/full: No space left on device", {}, "", true},
    {"ReportToFifo", run + "--report fifo", 0, "", {"fifo", "out"}, "mkfifo fifo && (cat fifo > out &)",
     false, "", "test -p fifo && " + fifo_read},
    // A symlink keeps pointing where it did; its target gets the new content.
    {"ReportThroughSymlink", run + "--report link.json", 0, "", {"link.json", "real/", "real/r.json"},
     "mkdir real && ln -s real/r.json link.json", false, "",
     "test -L link.json && grep -q schema_version real/r.json"},
    {"SaveThroughSymlink", run + "--save link.st", 0, "", {"link.st", "c.st"},
     "echo old > c.st && ln -s c.st link.st", false, "", "test -L link.st && ! grep -q old c.st"},
    // Modes: an old file's is kept, a new file's follows the umask.
    {"ReportKeepsMode0600", run + "--report r.json", 0, "", {"r.json"},
     "umask 077 && echo old > r.json && chmod 0600 r.json", false, "",
     "test \"$(stat -c %a r.json)\" = 600 && grep -q schema_version r.json"},
    {"ReportKeepsMode0640", run + "--report r.json", 0, "", {"r.json"},
     "umask 022 && echo old > r.json && chmod 0640 r.json", false, "", "test \"$(stat -c %a r.json)\" = 640"},
    {"NewReportFollowsUmask077", run + "--report r.json", 0, "", {"r.json"}, "umask 077", false, "",
     "test \"$(stat -c %a r.json)\" = 600"},
    {"NewSaveFollowsUmask027", run + "--save c.st", 0, "", {"c.st"}, "umask 027", false, "",
     "test \"$(stat -c %a c.st)\" = 640"},
    // Missing folders are created, by every command alike.
    {"ReportInMissingFolder", run + "--report nodir/sub/r.json", 0, "", {"nodir/", "nodir/sub/", "nodir/sub/r.json"}},
    {"SaveInMissingFolder", run + "--save nodir/c.st", 0, "", {"nodir/", "nodir/c.st"}},
    {"SweepOutInMissingFolder", sweep + "--out nodir/s.json", 0, "", {"nodir/", "nodir/s.json"}},
    {"PlotOutInMissingFolder", "plot s.json --out nodir/img", 0, "",
     {"s.json", "nodir/", "nodir/img/", "nodir/img/efficiency.png", "nodir/img/efficiency.svg",
      "nodir/img/scaling_prediction.png", "nodir/img/scaling_prediction.svg", "nodir/img/speedup.png",
      "nodir/img/speedup.svg", "nodir/img/throughput.png", "nodir/img/throughput.svg",
      "nodir/img/time_to_accuracy.png", "nodir/img/time_to_accuracy.svg"},
     sweep_report},
    // Refused before any work: an unwritable folder, a folder where a file belongs, a file where
    // a folder belongs. The long runs would take minutes if they trained first.
    {"ReportInUnwritableFolder", long_run + "--report ro/r.json", 1, "--report ro/r.json: cannot write into ro",
     {"ro/"}, "mkdir ro && chmod 0555 ro", true},
    {"SaveInUnwritableFolder", long_run + "--save ro/sub/c.st", 1, "--save ro/sub/c.st: cannot write into ro",
     {"ro/"}, "mkdir ro && chmod 0555 ro", true},
    {"ReportIsAFolder", long_run + "--report out", 1, "--report out: is a folder", {"out/"}, "mkdir out"},
    {"SaveIsAFolder", long_run + "--save out", 1, "--save out: is a folder", {"out/"}, "mkdir out"},
    {"SaveUnderAFile", long_run + "--report r.json --save f/c.st", 1, "f is not a folder", {"f"}, "touch f"},
    {"BadReportWritesNoCheckpoint", long_run + "--save c.st --report out", 1, "--report out: is a folder",
     {"out/"}, "mkdir out"},
    {"SweepOutInUnwritableFolder", sweep + "--out ro/s.json", 1, "--out ro/s.json: cannot write into ro",
     {"ro/"}, "mkdir ro && chmod 0555 ro", true, "fc3/serial"},
    {"SweepOutIsAFolder", sweep + "--out out", 1, "--out out: is a folder", {"out/"}, "mkdir out", false,
     "fc3/serial"},
    {"PlotOutIsAFile", "plot s.json --out img", 1, "--out img: is not a folder", {"s.json", "img"},
     sweep_report + " && touch img"},
    {"PlotOutInUnwritableFolder", "plot s.json --out ro/img", 1, "--out ro/img: cannot write into ro",
     {"s.json", "ro/"}, sweep_report + " && mkdir ro && chmod 0555 ro", true},
    // The report and the summary line say the same; the config says what ran.
    {"ReportHasBothLossesAndRealSteps", "train --model fc3 --synthetic 256 --epochs 2 --report r.json", 0,
     "last step loss", {"r.json"}, "", false, "",
     "python3 -c \"import json; r = json.load(open('r.json')); m = r['metrics']; c = r['config']; "
     "assert c['steps'] == 8 and c['epochs'] == 2, c; assert c['lr'] == 0.01 and c['momentum'] == 0.9, c; "
     "assert m['last_step_loss'] == r['loss_curve'][-1], m; "
     "assert m['epoch_mean_loss'] == r['epochs'][-1]['mean_loss'], m\" && "
     "grep -q '\"lr\": 0.01,' r.json"},
    {"ProgressLinesWhenAsked", run + "--progress lines", 0, "step 1/1 (100%)"},
    // A failed write to standard output is an error (exit 1) in every command.
    {"InfoToDevFull", "info >/dev/full", 1, "cnnbench: error: cannot write to standard output"},
    {"InfoJsonToDevFull", "info --json >/dev/full", 1, "cannot write to standard output"},
    {"ManToDevFull", "man >/dev/full", 1, "cannot write to standard output"},
    {"CompletionToDevFull", "completion bash >/dev/full", 1, "cannot write to standard output"},
    {"HelpToDevFull", "train --help >/dev/full", 1, "cannot write to standard output"},
    {"VersionToDevFull", "--version >/dev/full", 1, "cannot write to standard output"},
    {"TrainSummaryToDevFull", "train --model fc3 --synthetic 128 --steps 1 >/dev/full", 1,
     "cannot write to standard output"},
    {"TrainReportToStdoutDevFull", run + "--report - >/dev/full", 1,
     "cannot write to standard output: No space left on device"},
    {"CompareToDevFull", "compare s.json s.json >/dev/full", 1, "cannot write to standard output",
     {"s.json"}, sweep_report},
    {"CompareJsonToDevFull", "compare s.json s.json --json >/dev/full", 1,
     "cannot write to standard output: No space left on device",
     {"s.json"}, sweep_report},
    {"ProgressUnknownMode", run + "--progress dots", 2, "--progress"},
};

}  // namespace

CNNBENCH_EDGE_TABLE(WriteEdges, kWriteEdges);
