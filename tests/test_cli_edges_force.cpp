// The output rule's last part, on every command: an existing file is never replaced without
// --force. Refused before any work (the long runs would take minutes), with the option, the path
// and what to pass, exit 1, the old file unchanged byte for byte and no other output written;
// with --force it is replaced. A train run that saves to the checkpoint it resumes from continues
// that run in place and replaces its own outputs without --force (a requeued Slurm job reruns its
// command). tests/cli_edges.hpp runs the rows.
#include <string>
#include <vector>

#include "cli_edges.hpp"
#include "cnnbench/config.hpp"

namespace {

using cnnbench::test::Edge;

const std::string run = "train --model fc3 --synthetic 128 --steps 1 --quiet ";
const std::string long_run = "train --model fc3 --synthetic 128 --steps 100000 --quiet ";
const std::string sweep =
    "sweep --model fc3 --strategies serial --cores 1 --repeat 1 --warmup 0 --steps 1 --synthetic 64 --quiet ";
const std::string sweep_report =
    std::string("cp '") + CNNBENCH_SOURCE_DIR + "/fuzz/corpus/report/sweep_small.json' s.json && chmod 0644 s.json";
const std::string scaling_model = std::string("scaling-model --fabric '") + CNNBENCH_SOURCE_DIR +
                                  "/plots/fabric_profiles.json' --serial-step 0.01 ";
const std::string allreduce = "allreduce-bench --allow-one-rank --min-bytes 4 --max-bytes 64 ";

// An old file FILE and its copy FILE.bak, to compare with afterwards.
std::string old_file(const std::string& file) { return "echo old > " + file + " && cp " + file + " " + file + ".bak"; }
std::string unchanged(const std::string& file) { return "cmp " + file + " " + file + ".bak"; }
std::string replaced(const std::string& file) { return "! cmp -s " + file + " " + file + ".bak"; }
std::string exists_message(const std::string& what) { return what + ": already exists; pass --force to overwrite it"; }

// The plots `plot` draws of a sweep report, in folder `dir`.
std::vector<std::string> plot_files(const std::string& dir) {
  std::vector<std::string> files = {dir + "/"};
  for (const char* name : {"breakdown", "efficiency", "scaling_prediction", "speedup", "throughput", "time_to_accuracy"}) {
    for (const char* ext : {".png", ".svg"}) files.push_back(dir + "/" + name + ext);
  }
  return files;
}
std::vector<std::string> with(std::vector<std::string> files, const std::vector<std::string>& more) {
  files.insert(files.end(), more.begin(), more.end());
  return files;
}

// A checkpoint at step 1 with the report of its run, as an interrupted job leaves them.
const std::string first_sitting = "{cli} " + run + "--save ck.st --report r.json && cp ck.st ck.st.bak && cp r.json r.json.bak";
const std::vector<std::string> first_sitting_files = {"ck.st", "ck.st.bak", "r.json", "r.json.bak"};

const std::vector<Edge> kForceEdges = {
    // The kernel cache --isa best reads is an input: no output may name it, even through a link,
    // and --force does not lift that.
    {"TrainReportOverTheKernelCache", run + "--isa best --report k.json --force", 1,
     "the same file as the kernel cache that --isa best reads", {"k.json"},
     "ln -s \"$({cli} info --isa best | sed -n 's/^  kernel cache *//p')\" k.json && test -s k.json", false, "",
     "test -L k.json"},
    // train: every output, alone and among others (none of which is written).
    {"TrainReportExists", long_run + "--report r.json --save c.st", 1, exists_message("--report r.json"),
     {"r.json", "r.json.bak"}, old_file("r.json"), false, "", unchanged("r.json")},
    {"TrainReportForced", run + "--report r.json --force", 0, "", {"r.json", "r.json.bak"}, old_file("r.json"),
     false, "", "grep -q schema_version r.json"},
    {"TrainSaveExists", long_run + "--save c.st --report r.json", 1, exists_message("--save c.st"),
     {"c.st", "c.st.bak"}, old_file("c.st"), false, "", unchanged("c.st")},
    {"TrainSaveForced", run + "--save c.st --force", 0, "", {"c.st", "c.st.bak"}, old_file("c.st"), false, "",
     replaced("c.st")},
    {"TrainSaveInitExists", "train --model fc3 --synthetic 128 --save-init i.st", 1, exists_message("--save-init i.st"),
     {"i.st", "i.st.bak"}, old_file("i.st"), false, "initial weights written", unchanged("i.st")},
    {"TrainSaveInitForced", "train --model fc3 --synthetic 128 --save-init i.st --force", 0, "initial weights written to i.st",
     {"i.st", "i.st.bak"}, old_file("i.st"), false, "", replaced("i.st")},
    {"TrainTraceExists", long_run + "--trace t.json", 1, exists_message("--trace t.json"), {"t.json", "t.json.bak"},
     old_file("t.json"), false, "", unchanged("t.json")},
    {"TrainTraceForced", run + "--trace t.json --force", 0, "", {"t.json", "t.json.bak"}, old_file("t.json"), false,
     "", "grep -q traceEvents t.json"},
    {"TrainGraphExists", "train --model fc3 --strategy stream --synthetic 128 --steps 100000 --quiet --graph g.dot", 1,
     exists_message("--graph g.dot"), {"g.dot", "g.dot.bak"}, old_file("g.dot"), false, "", unchanged("g.dot")},
    {"TrainGraphForced", "train --model fc3 --strategy stream --synthetic 128 --steps 1 --quiet --graph g.dot --force",
     0, "", {"g.dot", "g.dot.bak"}, old_file("g.dot"), false, "", "grep -q digraph g.dot"},
    // Any file that would be replaced counts: an empty one, a symlink's target, a hard link.
    {"TrainReportEmptyFileExists", long_run + "--report r.json", 1, exists_message("--report r.json"), {"r.json"},
     "touch r.json", false, "", "test ! -s r.json"},
    {"TrainReportSymlinkTargetExists", long_run + "--report link.json", 1, exists_message("--report link.json"),
     {"link.json", "r.json", "r.json.bak"}, old_file("r.json") + " && ln -s r.json link.json", false, "",
     unchanged("r.json")},
    {"TrainReportHardLinkExists", long_run + "--report r.json", 1, exists_message("--report r.json"),
     {"other", "r.json", "r.json.bak"}, old_file("r.json") + " && ln r.json other", false, "", unchanged("r.json")},
    // A device is written in place, not replaced; a dangling symlink's target is new.
    {"TrainReportToDevNull", run + "--report /dev/null", 0, ""},
    {"TrainReportThroughDanglingSymlink", run + "--report link.json", 0, "", {"link.json", "r.json"},
     "ln -s r.json link.json", false, "", "grep -q schema_version r.json"},
    // A clash --force cannot fix is said first.
    {"TrainForcedReportOverResume", long_run + "--resume ck.st --report ck.st --force", 1,
     "--report ck.st: the same file as --resume ck.st", {"ck.st", "ck.st.bak"},
     "{cli} " + run + "--save ck.st && cp ck.st ck.st.bak", false, "", unchanged("ck.st")},
    // A run that saves to the checkpoint it resumes from continues it in place: its checkpoint and
    // report (an interrupted run writes both) are its own, replaced without --force.
    {"TrainContinuesInPlace", "train --model fc3 --synthetic 128 --steps 2 --quiet --resume ck.st --save ./ck.st "
     "--report r.json", 0, "", first_sitting_files, first_sitting, false, "",
     replaced("ck.st") + " && " + replaced("r.json") + " && grep -q '\"steps\": 2' r.json"},
    {"TrainContinuesInPlaceReportOverCheckpoint", long_run + "--resume ck.st --save ck.st --report ck.st", 1,
     "--save ck.st: the same file as --report ck.st", first_sitting_files, first_sitting, false, "",
     unchanged("ck.st")},
    // Resuming into another file is a new run: its existing outputs are refused.
    {"TrainResumeIntoAnotherExistingFile", long_run + "--resume ck.st --save other.st", 1,
     exists_message("--save other.st"), {"ck.st", "ck.st.bak", "other.st", "other.st.bak"},
     "{cli} " + run + "--save ck.st && cp ck.st ck.st.bak && " + old_file("other.st"), false, "",
     unchanged("other.st") + " && " + unchanged("ck.st")},
    {"TrainResumeWithAnExistingReport", long_run + "--resume ck.st --save next.st --report r.json", 1,
     exists_message("--report r.json"), first_sitting_files, first_sitting, false, "", unchanged("r.json")},

    // sweep: the report (--resume continues it), the page and the traces, before the first point.
    {"SweepOutExists", sweep + "--out s.json", 1,
     "--out s.json: already exists; pass --resume to keep its finished points and measure the rest, or --force "
     "to overwrite it", {"s.json", "s.json.bak"}, old_file("s.json"), false, "fc3/serial", unchanged("s.json")},
    {"SweepHtmlExists", sweep + "--out s.json --html p.html", 1, exists_message("--html p.html"),
     {"p.html", "p.html.bak"}, old_file("p.html"), false, "fc3/serial", unchanged("p.html")},
    {"SweepTraceExists", sweep + "--out s.json --trace-dir t", 1,
     "--trace-dir t: t/fc3-serial-n1c1.json already exists; pass --force to overwrite it",
     {"t/", "t/fc3-serial-n1c1.json", "t.bak"}, "mkdir t && echo old > t/fc3-serial-n1c1.json && cp "
     "t/fc3-serial-n1c1.json t.bak", false, "fc3/serial", "cmp t/fc3-serial-n1c1.json t.bak"},
    {"SweepTraceForced", sweep + "--out s.json --trace-dir t --force", 0, "",
     {"s.json", "t/", "t/fc3-serial-n1c1.json"}, "mkdir t && echo old > t/fc3-serial-n1c1.json", false, "",
     "grep -q traceEvents t/fc3-serial-n1c1.json"},
    {"SweepTraceResumed", sweep + "--out s.json --trace-dir t --resume", 0, "",
     {"s.json", "t/", "t/fc3-serial-n1c1.json"}, "mkdir t && echo old > t/fc3-serial-n1c1.json", false, "",
     "grep -q traceEvents t/fc3-serial-n1c1.json"},
    // The page and the traces are written at the end of hours of measuring: a folder that takes
    // no file is refused before, whatever its mode says (/proc takes none even from root).
    {"SweepTraceDirReadOnly", sweep + "--out s.json --trace-dir ro/t", 1, "--trace-dir ro/t: cannot write into ro",
     {"ro/"}, "mkdir ro && chmod 0555 ro", true, "fc3/serial"},
    {"SweepHtmlInReadOnlyFolder", sweep + "--out s.json --html ro/p.html", 1, "--html ro/p.html: cannot write into ro",
     {"ro/"}, "mkdir ro && chmod 0555 ro", true, "fc3/serial"},
    {"SweepTraceDirTakesNoFile", sweep + "--out s.json --trace-dir /proc/cnnbench-traces", 1,
     "--trace-dir /proc/cnnbench-traces: cannot ", {}, "", false, "fc3/serial"},
    {"SweepHtmlFolderTakesNoFile", sweep + "--out s.json --html /proc/cnnbench.html", 1,
     "--html /proc/cnnbench.html: cannot ", {}, "", false, "fc3/serial"},

    // report, plot, scaling-model, allreduce-bench.
    {"ReportOutExists", "report s.json --out p.html", 1, exists_message("--out p.html"),
     {"s.json", "p.html", "p.html.bak"}, sweep_report + " && " + old_file("p.html"), false, "wrote",
     unchanged("p.html")},
    {"PlotOutFileExists", "plot s.json --out img", 1,
     "--out img: img/speedup.png already exists; pass --force to overwrite it",
     {"s.json", "img/", "img/speedup.png", "speedup.bak"},
     sweep_report + " && mkdir img && echo old > img/speedup.png && cp img/speedup.png speedup.bak", false, "wrote",
     "cmp img/speedup.png speedup.bak"},
    {"PlotOutFileForced", "plot s.json --out img --force", 0, "wrote img/speedup.png and .svg",
     with(plot_files("img"), {"s.json", "speedup.bak"}),
     sweep_report + " && mkdir img && echo old > img/speedup.png && cp img/speedup.png speedup.bak", false, "",
     "! cmp -s img/speedup.png speedup.bak"},
    {"PlotOutFolderOfOtherFiles", "plot s.json --out img", 0, "", with(plot_files("img"), {"s.json", "img/notes.txt"}),
     sweep_report + " && mkdir img && echo mine > img/notes.txt", false, "", "grep -q mine img/notes.txt"},
    {"ScalingModelReportExists", scaling_model + "--report m.json", 1, exists_message("--report m.json"),
     {"m.json", "m.json.bak"}, old_file("m.json"), false, "", unchanged("m.json")},
    {"ScalingModelReportForced", scaling_model + "--report m.json --force", 0, "", {"m.json", "m.json.bak"},
     old_file("m.json"), false, "", replaced("m.json")},
    {"AllreduceReportExists", allreduce + "--report a.json", 1, exists_message("--report a.json"),
     {"a.json", "a.json.bak"}, old_file("a.json"), false, "", unchanged("a.json")},
#if CNNBENCH_HAVE_MPI
    // Measuring needs MPI; the refusal above comes before that, in every build.
    {"AllreduceReportForced", allreduce + "--report a.json --force", 0, "", {"a.json", "a.json.bak"},
     old_file("a.json"), false, "", replaced("a.json")},
#endif
};

}  // namespace

CNNBENCH_EDGE_TABLE(ForceEdges, kForceEdges);
