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
// Names near the file system's 255-byte limit: write_output writes ".NAME.tmp.PID.N" first.
const std::string name_255(255, 'r');
const std::string name_256(256, 'r');
const std::string name_200 = std::string(195, 'r') + ".json";
// A missing folder path over PATH_MAX (4096 bytes): 21 folders of 200 bytes.
const std::string deep_path = [] {
  std::string path;
  for (int i = 0; i < 21; ++i) path += std::string(200, 'd') + "/";
  return path + "r.json";
}();
// A checkpoint of a short run, and a folder that looks like MNIST to the output rule.
const std::string make_checkpoint = "{cli} train --model fc3 --synthetic 128 --steps 1 --quiet --save ck.st && cp ck.st ck.bak";
const std::string fake_mnist =
    "mkdir d && for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte "
    "t10k-labels-idx1-ubyte; do echo data > d/$f; done";
const std::vector<std::string> fake_mnist_files = {"d/", "d/train-images-idx3-ubyte", "d/train-labels-idx1-ubyte",
                                                   "d/t10k-images-idx3-ubyte", "d/t10k-labels-idx1-ubyte"};
std::vector<std::string> with(std::vector<std::string> files, const std::vector<std::string>& more) {
  files.insert(files.end(), more.begin(), more.end());
  return files;
}
const std::string data_intact = "for f in d/*; do test \"$(cat $f)\" = data; done";

// Waits (bounded) for the background reader of a FIFO to have written what it read.
const std::string fifo_read = "for i in $(seq 50); do grep -q '\"kind\": \"run\"' out && exit 0; sleep 0.1; done; exit 1";

const std::vector<Edge> kWriteEdges = {
    // Devices are written in place, and their errors are errors. As nobody: root would replace
    // /dev/full with a file if the write were not in place.
    {"ReportToDevFull", run + "--report /dev/full", 1, "No space left on device", {}, "", true},
    {"SaveToDevFull", run + "--save /dev/full", 1, "/dev/full: No space left on device", {}, "", true},
    {"ReportToFifo", run + "--report fifo", 0, "", {"fifo", "out"}, "mkfifo fifo && (cat fifo > out &)",
     false, "", "test -p fifo && " + fifo_read},
    // A symlink keeps pointing where it did; its target gets the new content (an existing one with
    // --force: tests/test_cli_edges_force.cpp).
    {"ReportThroughSymlink", run + "--report link.json", 0, "", {"link.json", "real/", "real/r.json"},
     "mkdir real && ln -s real/r.json link.json", false, "",
     "test -L link.json && grep -q schema_version real/r.json"},
    {"SaveThroughSymlink", run + "--save link.st --force", 0, "", {"link.st", "c.st"},
     "echo old > c.st && ln -s c.st link.st", false, "", "test -L link.st && ! grep -q old c.st"},
    // Modes: an old file's is kept, a new file's follows the umask.
    {"ReportKeepsMode0600", run + "--report r.json --force", 0, "", {"r.json"},
     "umask 077 && echo old > r.json && chmod 0600 r.json", false, "",
     "test \"$(stat -c %a r.json)\" = 600 && grep -q schema_version r.json"},
    {"ReportKeepsMode0640", run + "--report r.json --force", 0, "", {"r.json"},
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
     {"s.json", "nodir/", "nodir/img/", "nodir/img/breakdown.png", "nodir/img/breakdown.svg",
      "nodir/img/efficiency.png", "nodir/img/efficiency.svg",
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
    {"SweepTraceDirIsAFile", sweep + "--out s.json --trace-dir t", 1, "--trace-dir t: is not a folder", {"t"},
     "touch t", false, "fc3/serial"},
    // A point's trace would replace the report: refused before the first point.
    {"SweepTraceOverItsReport", sweep + "--out t/fc3-serial-n1c1.json --trace-dir t", 1,
     "the same file as --trace-dir t (fc3-serial-n1c1.json)", {}, "", false, "fc3/serial"},
    {"PlotOutIsAFile", "plot s.json --out img", 1, "--out img: is not a folder", {"s.json", "img"},
     sweep_report + " && touch img"},
    {"PlotOutInUnwritableFolder", "plot s.json --out ro/img", 1, "--out ro/img: cannot write into ro",
     {"s.json", "ro/"}, sweep_report + " && mkdir ro && chmod 0555 ro", true},
    // The output rule (check_outputs): an empty path is a usage error, for every output.
    {"ReportEmptyPath", run + "--report ''", 2, "--report: the path is empty"},
    {"SaveEmptyPath", run + "--save ''", 2, "--save: the path is empty"},
    {"ReportEqualsNothing", run + "--report=", 2, "--report"},
    {"TraceEmptyPath", run + "--trace ''", 2, "--trace: the path is empty"},
    {"GraphEmptyPath", "train --model fc3 --strategy stream --synthetic 128 --steps 1 --graph ''", 2,
     "--graph: the path is empty"},
    {"SweepOutEmptyPath", sweep + "--out ''", 2, "--out: the path is empty", {}, "", false, "fc3/serial"},
    {"PlotOutEmptyPath", "plot s.json --out ''", 2, "--out: the path is empty", {"s.json"}, sweep_report},
    {"AllreduceReportEmptyPath", "allreduce-bench --report ''", 2, "--report: the path is empty"},
    // Names: the final name and the temporary one both fit NAME_MAX, the path PATH_MAX; checked
    // before the (minutes long) run, and no missing folder is created for a path that cannot be.
    {"ReportName255Bytes", long_run + "--report " + name_255, 1,
     "the temporary file written first beside it"},
    {"ReportName256Bytes", long_run + "--report " + name_256, 1, "is 256 bytes; this file system allows 255"},
    {"SaveName200BytesIsWritten", run + "--save " + name_200, 0, "", {name_200}},
    {"SaveInMissingFolderNameTooLong", long_run + "--save " + name_256 + "/c.st", 1,
     "is 256 bytes; this file system allows 255"},
    {"SweepOutName255Bytes", sweep + "--out " + name_255, 1, "the temporary file written first", {}, "",
     false, "fc3/serial"},
    {"ReportPathOverPathMax", long_run + "--report " + deep_path, 1, "paths are limited to 4095"},
    // No two outputs are one file: the same name, ./x and x, a symlink, a hard link.
    {"ReportAndSaveSameName", long_run + "--report x --save x", 1, "--save x: the same file as --report x"},
    {"ReportAndSaveDotSlash", long_run + "--report ./x --save x", 1, "the same file as --report ./x"},
    {"ReportAndTraceViaSymlink", long_run + "--trace t.json --report l.json", 1,
     "--trace t.json: the same file as --report l.json", {"l.json"}, "ln -s t.json l.json"},
    {"ReportAndSaveViaFolderSymlink", long_run + "--save sub/x --report real/x", 1, "the same file as",
     {"real/", "sub"}, "mkdir real && ln -s real sub"},
    {"ReportAndSaveHardLinked", long_run + "--report a --save b", 1, "--save b: the same file as --report a",
     {"a", "b"}, "echo old > a && ln a b", false, "", "test \"$(cat b)\" = old"},
    {"ReportAndTraceBothStdout", long_run + "--report - --trace -", 1, "writes to standard output already"},
    {"DevNullTwiceIsFine", run + "--report /dev/null --save /dev/null", 0, ""},
    // No output is an input: the checkpoint resumed from, the init weights, the data's files; but
    // --save over --resume continues that run in place.
    {"ReportOverResumeCheckpoint", long_run + "--resume ck.st --report ck.st", 1,
     "--report ck.st: the same file as --resume ck.st, which this command reads", {"ck.st", "ck.bak"},
     make_checkpoint, false, "", "cmp ck.st ck.bak"},
    {"SaveOverResumeCheckpointContinuesIt", "train --model fc3 --synthetic 128 --steps 2 --quiet --resume ck.st "
     "--save ./ck.st", 0, "", {"ck.st", "ck.bak"}, make_checkpoint, false, "", "! cmp -s ck.st ck.bak"},
    {"TraceOverInitWeights", long_run + "--init ck.st --trace ck.st", 1, "the same file as --init ck.st",
     {"ck.st", "ck.bak"}, make_checkpoint, false, "", "cmp ck.st ck.bak"},
    {"ReportOverDataFile", "train --model fc3 --data d --steps 1 --quiet --report d/train-labels-idx1-ubyte", 1,
     "the same file as d/train-labels-idx1-ubyte (in --data d)", fake_mnist_files, fake_mnist, false, "",
     data_intact},
    {"SaveOverDataFileViaSymlink", "train --model fc3 --data d --steps 1 --quiet --save labels.st", 1,
     "(in --data d), which this command reads", with(fake_mnist_files, {"labels.st"}),
     fake_mnist + " && ln -s d/train-labels-idx1-ubyte labels.st", false, "", data_intact},
    {"SweepOutOverDataFile",
     "sweep --model fc3 --strategies serial --cores 1 --repeat 1 --warmup 0 --steps 1 --data d "
     "--out d/t10k-images-idx3-ubyte --force", 1,
     "the same file as d/t10k-images-idx3-ubyte (in --data d)", fake_mnist_files, fake_mnist, false,
     "fc3/serial", data_intact},
    {"PlotOutOverItsReport", "plot speedup.png --out .", 1, "the same file as REPORT speedup.png",
     {"speedup.png"}, sweep_report + " && mv s.json speedup.png"},
    // Each output on its own: a full disk for one keeps no other from being written, the
    // summary lists both, and the exit code says one failed.
    {"SaveToDevFullReportStillWritten", run + "--save /dev/full --report r.json", 1,
     "not written: --save /dev/full; written: --report r.json", {"r.json"}, "", true, "",
     "grep -q schema_version r.json"},
    {"ReportToDevFullSaveStillWritten", run + "--report /dev/full --save c.st", 1,
     "not written: --report /dev/full; written: --save c.st", {"c.st"}, "", true},
    {"SummaryListsWhatWasWritten", "train --model fc3 --synthetic 128 --steps 1 --report r.json --save c.st", 0,
     "written: --save c.st, --report r.json", {"r.json", "c.st"}},
    // Without --save an interrupted run saves into the working folder: it must be writable.
    {"InterruptFolderUnwritable", long_run, 1, "the folder an interrupted run saves its checkpoint in",
     {"ro/"}, "mkdir ro && chmod 0555 ro && cd ro", true},
    {"AllreduceReportIsAFolder", "allreduce-bench --allow-one-rank --report out", 1, "--report out: is a folder",
     {"out/"}, "mkdir out"},
    // A sweep without --steps calibrates each point to --min-time and says how in its report;
    // the paired serial repetitions keep the baseline's steps, and the pairs compare per image.
    {"SweepCalibratesToMinTime",
     "sweep --model fc3 --strategies serial,blas --cores 1 --repeat 2 --warmup 0 --synthetic 256 "
     "--min-time 0.2 --quiet --out s.json", 0, "", {"s.json"}, "", false, "",
     "python3 -c \"import json; r = json.load(open('s.json')); c = r['config']; "
     "assert c['steps'] is None and c['min_time_s'] == 0.2, c; "
     "ps = {p['id']: p for p in r['points'] if p['status'] == 'ok'}; assert len(ps) == 2, ps.keys(); "
     "probes = [p['calibration']['probes'] for p in ps.values()]; "
     "assert all(q[-1]['seconds'] >= 0.2 and q[-2]['seconds'] >= 0.2 and q[-1]['steps'] == q[-2]['steps'] "
     "for q in probes), probes; "
     "assert all(q[0]['steps'] == 10 for q in probes) and any(len(q) > 1 for q in probes), probes; "
     "assert all(p['steps'] == p['calibration']['probes'][-1]['steps'] for p in ps.values()); "
     "s, b = ps['fc3/serial/n1c1'], ps['fc3/blas/n1c1']; pb = b['paired_baseline']; "
     "assert pb['steps'] == s['steps'], (pb, s['steps']); "
     "want = [(t / pb['steps']) / (u / b['steps']) for t, u in zip(pb['times_s'], b['times_s'])]; "
     "assert all(abs(x - y) < 1e-9 * y for x, y in zip(pb['ratios'], want)), (pb['ratios'], want)\""},
    {"SweepStepsGivenAreNotCalibrated", sweep + "--quiet --out s.json", 0, "", {"s.json"}, "", false, "",
     "python3 -c \"import json; r = json.load(open('s.json')); c = r['config']; "
     "assert c['steps'] == 1 and c['min_time_s'] is None, c; "
     "assert all(p['steps'] == 1 and 'calibration' not in p for p in r['points']), r['points']\""},
    {"SweepMinTimeWithSteps", sweep + "--min-time 0.1 --out s.json", 2, "excludes --min-time"},
    {"SweepMinTimeZero", "sweep --model fc3 --min-time 0 --out s.json", 2, "--min-time"},
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
