// Edge cases of compare, plot, the sweep's report and exit status, and allreduce-bench: reports
// that differ in settings or machine, incomplete or failed ones, unreadable ones, a threshold
// without its percent sign, an existing --out, a failing point, a launcher that cannot start, one
// MPI rank (tests/cli_edges.hpp runs the rows).
#include <string>
#include <vector>

#include "cli_edges.hpp"
#include "cnnbench/config.hpp"

namespace {

using cnnbench::test::Edge;

// Shell that writes a sweep report of one fc3 point with five repetitions around `median` seconds;
// `config`, `context`, `complete` and `more_points` (", {...}") go in as given.
std::string report(const std::string& file, double median, const std::string& config = "{}",
                   const std::string& context = "{}", const std::string& complete = "true",
                   const std::string& more_points = "") {
  const auto t = [&](double f) { return std::to_string(median * f); };
  const std::string json =
      R"({"schema_version":1,"kind":"sweep","complete":)" + complete + R"(,"context":)" + context +
      R"(,"config":)" + config +
      R"(,"points":[{"id":"fc3/serial/n1c1","model":"fc3","strategy":"serial","cores":1,"nodes":1,)" +
      R"("p":1,"series":"serial","status":"ok","times_s":[)" + t(1) + "," + t(1.01) + "," + t(0.99) + "," +
      t(1.02) + "," + t(0.98) + R"(],"time":{"median":)" + t(1) + R"(,"min":)" + t(0.98) + R"(,"max":)" +
      t(1.02) + R"(,"mean":)" + t(1) + R"(,"mad":)" + t(0.01) + "}}" + more_points + "]}";
  return "printf '%s' '" + json + "' > " + file;
}

const std::string failed_point =
    R"(,{"id":"fc3/stream/n1c2","model":"fc3","strategy":"stream","cores":2,"nodes":1,"p":2,)"
    R"("series":"stream","status":"failed","reason":"out of memory"})";

// Three repetitions a side, twice as slow: 3 against 3 can reach no p below 0.1.
std::string three_reps(const std::string& file, double median) {
  const auto t = [&](double f) { return std::to_string(median * f); };
  return "printf '%s' '" +
         std::string(R"({"schema_version":1,"kind":"sweep","complete":true,"context":{},"config":{},)") +
         R"("points":[{"id":"fc3/serial/n1c1","model":"fc3","strategy":"serial","cores":1,"nodes":1,)" +
         R"("status":"ok","times_s":[)" + t(1) + "," + t(1.01) + "," + t(0.99) + R"(],"time":{"median":)" +
         t(1) + R"(,"min":)" + t(0.99) + R"(,"max":)" + t(1.01) + "}}]}' > " + file;
}

// The smallest sweep there is: one serial point of one step on 64 synthetic images.
const std::string tiny_sweep =
    "sweep --model fc3 --strategies serial --steps 1 --repeat 1 --warmup 0 --synthetic 64 --quiet "
    "--out {dir}/out.json";

// The same report of an lenet5 point: no point in common with report()'s fc3.
std::string lenet5_report(const std::string& file) {
  return cnnbench::test::substitute(report(file, 1.0), "fc3", "lenet5");
}

// A PNG's first bytes, where a report belongs.
const std::string png = "printf '\\211PNG\\r\\n\\032\\n\\0\\0\\0\\rIHDR' > img.json";

const std::string base = report("base.json", 1.0);
// A page generator that exits 0 and writes nothing, with a copy to compare it with afterwards.
const std::string generator = "printf 'import sys\\nsys.exit(0)\\n' > gen.py && cp gen.py gen.bak";
// A plot script that names its images when asked (--names FILE: speedup) and draws none.
const std::string naming_generator =
    "printf 'import json, sys\\nif \"--names\" in sys.argv: json.dump([\"speedup\"], "
    "open(sys.argv[sys.argv.index(\"--names\") + 1], \"w\"))\\n' > gen.py && cp gen.py gen.bak";
const std::string same = report("new.json", 1.0);

const std::vector<Edge> kCompareEdges = {
    // --threshold: a bare number above 1 would mean hundreds of percent.
    {"ThresholdBareFiveIsAUsageError", "compare {dir}/base.json {dir}/new.json --threshold 5", 2,
     "write 5% (or 0.05)", {"base.json", "new.json"}, base + " && " + same},
    {"ThresholdFivePercent", "compare {dir}/base.json {dir}/new.json --threshold 5%", 0,
     "no regression beyond 5.0%", {"base.json", "new.json"}, base + " && " + same},
    {"ThresholdFraction", "compare {dir}/base.json {dir}/new.json --threshold 0.05", 0,
     "no regression beyond 5.0%", {"base.json", "new.json"}, base + " && " + same},
    // Settings and machines.
    {"ConfigDifferenceWarns", "compare {dir}/base.json {dir}/new.json", 0,
     "warning: the reports differ in batch: 16 (base) vs 256 (new)", {"base.json", "new.json"},
     report("base.json", 1.0, R"({"batch":16,"data":{"source":"mnist"}})") + " && " +
         report("new.json", 1.0, R"({"batch":256,"data":{"source":"mnist"}})")},
    {"StrictRefusesConfigDifference", "compare {dir}/base.json {dir}/new.json --strict", 2,
     "data source: mnist (base) vs synthetic (new)", {"base.json", "new.json"},
     report("base.json", 1.0, R"({"batch":64,"data":{"source":"mnist"}})") + " && " +
         report("new.json", 1.0, R"({"batch":64,"data":{"source":"synthetic"}})"),
     false, "no regression"},
    {"StrictAcceptsTheSameSettings", "compare {dir}/base.json {dir}/new.json --strict", 0,
     "no regression", {"base.json", "new.json"},
     report("base.json", 1.0, R"({"batch":64,"lr":0.01})") + " && " +
         report("new.json", 1.0, R"({"batch":64,"lr":0.01})"),
     false, "warning"},
    {"MachineDifferenceListed", "compare {dir}/base.json {dir}/new.json --strict", 2,
     "CPU: AMD EPYC 7763 (base) vs Intel Xeon 8480 (new)", {"base.json", "new.json"},
     report("base.json", 1.0, "{}", R"({"cpu_model":"AMD EPYC 7763"})") + " && " +
         report("new.json", 1.0, "{}", R"({"cpu_model":"Intel Xeon 8480"})")},
    // The same machine with another --isa: a warning naming the target; --same-machine refuses.
    {"SimdTargetDifferenceWarns", "compare {dir}/base.json {dir}/new.json", 0,
     "warning: the reports differ in SIMD target: avx2 (base) vs avx3_dl (new)",
     {"base.json", "new.json"},
     report("base.json", 1.0, "{}", R"({"simd":{"target":"avx2"}})") + " && " +
         report("new.json", 1.0, "{}", R"({"simd":{"target":"avx3_dl"}})")},
    // --isa best on two machines (or two calibrations): the same "mixed" target, other kernels.
    {"SimdKernelDifferenceWarns", "compare {dir}/base.json {dir}/new.json", 0,
     R"(warning: the reports differ in SIMD target per kernel: {"dense":"avx3","pool":"avx2"} (base) vs {"dense":"avx3","pool":"avx3"} (new))",
     {"base.json", "new.json"},
     report("base.json", 1.0, "{}",
            R"({"simd":{"target":"mixed","kernels":{"dense":"avx3","pool":"avx2"}}})") +
         " && " +
         report("new.json", 1.0, "{}",
                R"({"simd":{"target":"mixed","kernels":{"dense":"avx3","pool":"avx3"}}})")},
    {"SameMachineRefusesSimdTargetDifference",
     "compare {dir}/base.json {dir}/new.json --same-machine", 2,
     "SIMD target: avx2 (base) vs avx3_dl (new)", {"base.json", "new.json"},
     report("base.json", 1.0, "{}", R"({"simd":{"target":"avx2"}})") + " && " +
         report("new.json", 1.0, "{}", R"({"simd":{"target":"avx3_dl"}})"),
     false, "no regression"},
    {"SameMachineIgnoresSettings", "compare {dir}/base.json {dir}/new.json --same-machine", 0,
     "warning: the reports differ in batch", {"base.json", "new.json"},
     report("base.json", 1.0, R"({"batch":16})") + " && " + report("new.json", 1.0, R"({"batch":256})")},
    // significant is p < alpha: 3 repetitions against 3 never are, whatever the ratio.
    {"SignificantMeansPBelowAlpha", "compare {dir}/base.json {dir}/new.json --json", 1,
     R"("significant": false)", {"base.json", "new.json"},
     three_reps("base.json", 1.0) + " && " + three_reps("new.json", 2.0), false,
     R"("significant": true)"},
    // Reports that do not hold a whole measurement.
    {"IncompleteBaseExits1", "compare {dir}/base.json {dir}/new.json", 1,
     "base report is incomplete", {"base.json", "new.json"},
     report("base.json", 1.0, "{}", "{}", "false") + " && " + same},
    {"FailedPointExits1", "compare {dir}/base.json {dir}/new.json", 1,
     "new report: point fc3/stream/n1c2 failed: out of memory", {"base.json", "new.json"},
     base + " && " + report("new.json", 1.0, "{}", "{}", "true", failed_point)},
    // Unreadable reports: exit 1, one line naming the file, in compare and in plot alike.
    {"CorruptReportCompare", "compare {dir}/base.json {dir}/bad.json", 1, "bad.json: at byte",
     {"bad.json", "base.json"}, base + " && printf '{\"kind\":' > bad.json"},
    {"CorruptReportPlot", "plot {dir}/bad.json --out {dir}/plots", 1, "bad.json: at byte",
     {"bad.json"}, "printf '{\"kind\":' > bad.json"},
    {"MissingReportCompare", "compare {dir}/base.json {dir}/none.json", 1,
     "none.json: cannot open: No such file or directory", {"base.json"}, base},
    {"MissingReportPlot", "plot {dir}/none.json --out {dir}/plots", 1,
     "none.json: cannot open: No such file or directory", {}},
    {"PlotOutIsAFile", "plot {dir}/base.json --out {dir}/taken", 1, "taken", {"base.json", "taken"},
     base + " && printf x > taken"},
    // report reads its reports as compare does, and writes its page by the output rule.
    {"CorruptReportReport", "report {dir}/bad.json --out {dir}/r.html", 1, "bad.json: at byte",
     {"bad.json"}, "printf '{\"kind\":' > bad.json"},
    {"MissingBaselineReport", "report {dir}/base.json --baseline {dir}/none.json --out {dir}/r.html", 1,
     "none.json: cannot open: No such file or directory", {"base.json"}, base},
    {"ReportOverItsSweep", "report {dir}/base.json --out {dir}/base.json", 1,
     "the same file as SWEEP", {"base.json"}, base},
    // The page generator and what it imports are inputs too: no spelling of --out replaces them,
    // and each is refused before any work, the generator left as it was.
    {"ReportOverItsScript", "report base.json --script gen.py --out gen.py", 1,
     "--out gen.py: the same file as --script gen.py, which this command reads", {"base.json", "gen.bak", "gen.py"},
     base + " && " + generator, false, "", "cmp gen.py gen.bak"},
    {"ReportOverItsScriptDotSlash", "report base.json --script gen.py --out ./gen.py", 1,
     "the same file as --script gen.py", {"base.json", "gen.bak", "gen.py"}, base + " && " + generator, false, "",
     "cmp gen.py gen.bak"},
    {"ReportOverItsScriptViaSymlink", "report base.json --script gen.py --out page.html", 1,
     "--out page.html: the same file as --script gen.py", {"base.json", "gen.bak", "gen.py", "page.html"},
     base + " && " + generator + " && ln -s gen.py page.html", false, "", "cmp gen.py gen.bak"},
    {"ReportOverItsScriptHardLinked", "report base.json --script gen.py --out page.html", 1,
     "--out page.html: the same file as --script gen.py", {"base.json", "gen.bak", "gen.py", "page.html"},
     base + " && " + generator + " && ln gen.py page.html", false, "", "cmp gen.py gen.bak"},
    {"ReportOverTheScriptsModule", "report base.json --script s/gen.py --out s/plot_report.py", 1,
     "the same file as the script's module s/plot_report.py", {"base.json", "gen.bak", "gen.py", "s/", "s/gen.py",
                                                               "s/plot_report.py"},
     base + " && " + generator + " && mkdir s && cp gen.py s/gen.py && cp gen.py s/plot_report.py", false, "",
     "cmp s/plot_report.py gen.bak"},
    {"PlotOverItsScript", "plot base.json --script speedup.svg --out .", 1,
     "the same file as --script speedup.svg", {"base.json", "gen.bak", "gen.py", "speedup.svg"},
     base + " && " + naming_generator + " && cp gen.py speedup.svg", false, "", "cmp speedup.svg gen.bak"},
    // A generator that exits 0 has still to leave whole files: none, or a page cut short, is an error.
    {"ReportScriptWritesNoPage", "report base.json --script gen.py --out page.html", 1,
     "gen.py exited 0 but page.html does not exist", {"base.json", "gen.bak", "gen.py"}, base + " && " + generator,
     false, "wrote"},
    {"ReportScriptWritesHalfAPage", "report base.json --script half.py --out page.html", 1,
     "half.py exited 0 but page.html is cut short", {"base.json", "half.py"},
     base + " && printf 'import sys\\nopen(sys.argv[-1], \"w\").write(\"<html><body>\")\\n' > half.py", false,
     "wrote"},
    {"ReportScriptLeavesTheOldPage", "report base.json --script gen.py --out page.html --force", 1,
     "gen.py exited 0 but page.html is unchanged", {"base.json", "gen.bak", "gen.py", "page.html"},
     base + " && " + generator + " && printf '<html></html>' > page.html && touch -d 2020-01-01 page.html", false,
     "wrote"},
    {"PlotScriptWritesNoImages", "plot base.json --script gen.py --out img", 1,
     "gen.py exited 0 but img/speedup.png does not exist", {"base.json", "gen.bak", "gen.py"},
     base + " && " + naming_generator, false, "wrote"},
    {"PlotScriptNamesNoImages", "plot base.json --script gen.py --out img", 1,
     "gen.py exited 0 but named no images", {"base.json", "gen.bak", "gen.py"}, base + " && " + generator, false,
     "wrote"},
    {"ReportOutNamesAFolder", "report {dir}/base.json --out {dir}/page/", 1,
     "page/: names a folder; give the page a file name", {"base.json"}, base},
    {"ReportThresholdBareFive", "report {dir}/base.json --baseline {dir}/base.json --threshold 5", 2,
     "write 5% (or 0.05)", {"base.json"}, base},
    {"SweepHtmlOverItsReport", tiny_sweep + " --html {dir}/out.json", 1,
     "out.json: the same file as --out", {}},
    // The sweep keeps an existing report unless told what to do with it.
    {"SweepRefusesToOverwrite", tiny_sweep, 1, "out.json: already exists; pass --resume",
     {"out.json"}, "printf x > out.json"},
    {"SweepForceOverwrites", tiny_sweep + " --force", 0, "", {"out.json"}, "printf x > out.json"},
    {"SweepResumeKeepsTheReport", tiny_sweep + " --resume", 0, "", {"out.json"},
     "{cli} " + tiny_sweep},
    // A report whose lr and momentum were written at double precision resumes: the same settings.
    {"SweepResumesAnOlderReportsFloatSettings", tiny_sweep + " --resume", 0, "", {"out.json"},
     "{cli} " + tiny_sweep + " && python3 -c \"import json; r = json.load(open('out.json')); "
     "r['config']['lr'] = 0.009999999776482582; r['config']['momentum'] = 0.8999999761581421; "
     "json.dump(r, open('out.json', 'w'))\"",
     false, "different"},
    // One repetition: no MAD, and a warning that it cannot show a spread.
    {"SweepOneRepetitionHasNoMad", "sweep --model fc3 --strategies serial --steps 1 --repeat 1 "
     "--warmup 0 --synthetic 64 --out {dir}/out.json", 0, "fewer than 3 repetitions", {"out.json"},
     "", false, "MAD"},

    // Nothing in common: a gate that compared nothing must not pass.
    {"NothingToCompare", "compare {dir}/base.json {dir}/new.json", 2,
     "nothing to compare: base has fc3/serial/n1c1, new has lenet5/serial/n1c1",
     {"base.json", "new.json"}, base + " && " + lenet5_report("new.json"), false, "no regression"},
    {"NothingToCompareJson", "compare {dir}/base.json {dir}/new.json --json", 2, "nothing to compare",
     {"base.json", "new.json"}, base + " && " + lenet5_report("new.json"), false, "\"regression\""},
    {"NothingToCompareEitherWay", "compare {dir}/new.json {dir}/base.json", 2,
     "nothing to compare: base has lenet5/serial/n1c1, new has fc3/serial/n1c1",
     {"base.json", "new.json"}, base + " && " + lenet5_report("new.json")},
    // One setting, one precision: a float setting written at double precision by an older report
    // equals the same setting written as the float's shortest decimal.
    {"FloatSettingsCompareEqual", "compare {dir}/base.json {dir}/new.json --strict", 0, "no regression",
     {"base.json", "new.json"},
     report("base.json", 1.0, R"({"lr":0.009999999776482582,"momentum":0.8999999761581421})") +
         " && " + report("new.json", 1.0, R"({"lr":0.01,"momentum":0.9})"),
     false, "warning"},
    // Only the lr line is checked: the times of two 2-step runs say nothing (a busy core made one
    // 14x the other), so no slowdown short of 10,000x is a regression here.
    {"SweepAndRunStoreLrAlike", "compare {dir}/s.json {dir}/r.json --threshold 1000000%", 0, "",
     {"s.json", "r.json"},
     "{cli} sweep --model fc3 --strategies serial --steps 2 --repeat 1 --warmup 0 --synthetic 256 "
     "--quiet --out {dir}/s.json && {cli} train --model fc3 --synthetic 256 --steps 2 --quiet "
     "--report r.json && grep -q '\"lr\": 0.01,' s.json",
     false, "differ in lr"},
    // The verdict says what the test said: too few repetitions is not "beyond noise".
    {"VerdictSaysWhenTheThresholdAloneDecided", "compare {dir}/base.json {dir}/new.json", 1,
     "regression: 1 point more than 5.0% slower; too few repetitions to tell from noise",
     {"base.json", "new.json"}, three_reps("base.json", 1.0) + " && " + three_reps("new.json", 2.0),
     false, "beyond noise"},
    {"VerdictBeyondNoiseWhenSignificant", "compare {dir}/base.json {dir}/new.json", 1,
     "regression: 1 point more than 5.0% slower, beyond noise (p < 0.05)", {"base.json", "new.json"},
     base + " && " + report("new.json", 2.0)},
    // A diverged run is no measurement: compare says so and fails.
    {"CompareDivergedRun", "compare {dir}/a.json {dir}/b.json", 1,
     "new report: point fc3/serial/n1c1 diverged at step 2 (loss nan)", {"a.json", "b.json"},
     "{cli} train --model fc3 --synthetic 256 --steps 3 --quiet --report a.json && "
     "{ {cli} train --model fc3 --synthetic 256 --steps 3 --lr 1e30 --quiet --report b.json || true; }"},
    // Reports that are not JSON: one line, no parser's text, no raw byte.
    {"BinaryReportCompare", "compare {dir}/img.json {dir}/base.json", 1,
     "img.json: at byte 0: expected valid JSON, found byte 0x89 (a binary file, not a report)",
     {"base.json", "img.json"}, base + " && " + png},
    {"BinaryReportPlot", "plot {dir}/img.json --out {dir}/plots", 1,
     "img.json: at byte 0: expected valid JSON, found byte 0x89 (a binary file, not a report)",
     {"img.json"}, png},
    {"ControlByteInReport", "compare {dir}/c.json {dir}/c.json", 1,
     "c.json: at byte 9: expected valid JSON, found byte 0x01", {"c.json"},
     "printf '{\"kind\": \\001}' > c.json"},
    {"EmptyReport", "compare {dir}/e.json {dir}/e.json", 1,
     "e.json: at byte 0: expected valid JSON, found the end of the file", {"e.json"}, ": > e.json"},
    {"FolderAsReport", "compare {dir}/d {dir}/d", 1, "d: is a folder, not a report", {"d/"}, "mkdir d"},
#if CNNBENCH_HAVE_MPI
    // A cluster point whose launcher fails: the sweep says so, exits 1, and its report is not
    // complete (compare refuses it).
    {"SweepWithAFailedPointExits1",
     "sweep --model fc3 --strategies serial,cluster --nodes 1 --cores 1 --mpirun false --steps 1 "
     "--repeat 1 --warmup 0 --synthetic 64 --out {dir}/out.json",
     1, "1 point failed", {"out.json"}},
    {"FailedSweepIsIncomplete", "compare {dir}/out.json {dir}/out.json", 1,
     "base report is incomplete", {"out.json"},
     "{cli} sweep --model fc3 --strategies serial,cluster --nodes 1 --cores 1 --mpirun false "
     "--steps 1 --repeat 1 --warmup 0 --synthetic 64 --quiet --out {dir}/out.json || true"},
    // --launcher srun: an srun that is not there stops the sweep before its first point, and
    // the flags of one launcher are refused with the other (tests/slurm runs the real thing).
    {"SweepSrunNotFound",
     "sweep --model fc3 --strategies serial,cluster --nodes 1 --cores 1 --launcher srun "
     "--srun {dir}/no-srun --steps 1 --repeat 1 --warmup 0 --synthetic 64 --out {dir}/out.json",
     1, "no-srun not found", {}},
    {"SweepHostfileIsMpirunsOnly",
     "sweep --model fc3 --strategies cluster --launcher srun --hostfile {dir}/hosts --out {dir}/out.json",
     2, "--hostfile: applies to --launcher mpirun, not srun", {"hosts"}, "echo localhost > hosts"},
    {"SweepSrunArgsNeedSrun",
     "sweep --model fc3 --strategies cluster --srun-args=--exclusive --out {dir}/out.json", 2,
     "--srun-args: applies to --launcher srun", {}},
    {"SweepUnknownLauncher",
     "sweep --model fc3 --strategies cluster --launcher pbs --out {dir}/out.json", 2, "--launcher", {}},
    // A launched cluster point that diverges is marked so, from the report its run wrote.
    {"SweepMarksDivergedClusterPoint",
     "sweep --model fc3 --strategies cluster --nodes 2 --cores 1 --oversubscribe --lr 1e30 --steps 3 "
     "--repeat 1 --warmup 0 --synthetic 128 --out {dir}/out.json",
     1, "diverged: diverged at step 2 (loss nan)", {"out.json"}, "", false, "",
     "python3 -c \"import json; p = json.load(open('out.json'))['points']; "
     "assert p and all(x['status'] == 'diverged' for x in p) and "
     "any(x['strategy'] == 'cluster' for x in p), p\""},
    // The allreduce-bench that prices the cluster points runs before the first one and again
    // after the rounds; the report keeps the faster of the two, whose sizes it shows.
    {"SweepKeepsTheFasterOfTwoAllreduceBenches",
     "sweep --model fc3 --strategies serial,cluster --nodes 2 --cores 1 --oversubscribe --steps 3 "
     "--repeat 1 --warmup 0 --synthetic 128 --out {dir}/out.json",
     0, "measuring allreduce cost on 2 ranks again", {"out.json"}, "", false, "",
     "python3 -c \"import json; a = json.load(open('out.json'))['allreduce']; b = a['benches']; "
     "assert [x['when'] for x in b] == ['before the first cluster point', 'after the rounds'], b; "
     "kept = [x for x in b if x['kept']]; assert len(kept) == 1, b; "
     "assert kept[0]['total_s'] == min(x['total_s'] for x in b), b; "
     "total = sum(s['seconds'] for s in a['sizes']); assert abs(total / kept[0]['total_s'] - 1) < 1e-9, (total, b)\""},
    {"AllreduceBenchRefusesOneRank", "allreduce-bench", 2, "run it under mpirun -np N", {}},
    {"AllreduceBenchRoundsToWholeFloats",
     "allreduce-bench --allow-one-rank --min-bytes 5 --max-bytes 32 --repetitions 1 --warmup 0", 0,
     "--min-bytes 5 rounded up to 8", {}},
#endif
};

}  // namespace

CNNBENCH_EDGE_TABLE(CompareEdges, kCompareEdges);
