#!/usr/bin/env python3
"""A tiny real sweep (fc3, 3 steps, 3 repetitions, cores 1,2) validates against
results/schema/sweep-report.schema.json, the schema really constrains it, every point keeps the
time breakdown of its median repetition and --trace-dir a trace per point, its repetitions were
taken in rounds (every point's round r before any point's round r + 1) with core probes between
them, compare passes the report against itself and catches it made 2x slower, --resume keeps
finished points, and the plot script draws every image; a core probe made slow by the test hook
marks the repetitions next to it and retries them; a sweep stopped in its rounds keeps the rounds
done, marked, and --resume measures those points again; the committed reference report validates
too."""
import copy
import json
import os
import signal
import subprocess
import statistics
import sys
import tempfile
from pathlib import Path

from harness import FAILURES, check, parse_arguments, schema_validator

def errors_of(validator, report):
    return sorted(validator.iter_errors(report), key=lambda e: list(e.path))


def check_breakdowns(ok, traces):
    """Each measured point's breakdown is its median repetition's: the index it names holds the
    median time, and the breakdown's steps are that repetition's own (so its wall time is within
    the repetition's: the repetition also loads and gathers). Each point but gpu's has a trace."""
    for p in ok:
        k = p.get("median_repetition")
        breakdown = p.get("time_breakdown")
        if p["strategy"] == "gpu" and breakdown is None:
            continue
        if k is None or breakdown is None or "straggler" not in p:
            check(False, f"{p['id']}: median_repetition, time_breakdown and straggler are kept")
            return
        times = p["times_s"]
        if sorted(times)[(len(times) - 1) // 2] != times[k]:
            check(False, f"{p['id']}: median_repetition {k} is the repetition of the median time {times}")
            return
        if breakdown["steps"] != p["steps"] or not 0 < breakdown["wall_s"] <= times[k]:
            check(False, f"{p['id']}: the breakdown ({breakdown['steps']} steps, {breakdown['wall_s']} s) is "
                         f"of a repetition of {p['steps']} steps within {times[k]} s")
            return
        total = sum(breakdown[c] for c in ("compute_s", "update_s", "reduce_s", "communication_exposed_s",
                                           "imbalance_wait_s", "pipeline_bubble_s", "data_s", "other_s"))
        if abs(total - breakdown["wall_s"]) > 1e-6 * breakdown["wall_s"] + 1e-9:
            check(False, f"{p['id']}: the categories add up to wall_s ({total} vs {breakdown['wall_s']})")
            return
    check(True, "every measured point keeps its median repetition's time breakdown and straggler")
    traced = [p for p in ok if p["strategy"] != "gpu"]
    names = sorted(Path(p.get("trace", "")).name for p in traced)
    expected = sorted(p["id"].replace("/", "-") + ".json" for p in traced)
    check(names == expected and all(Path(traces, n).is_file() for n in expected),
          f"--trace-dir holds a trace per point, named after it ({names})")
    spans = [e for n in expected for e in json.loads(Path(traces, n).read_text())["traceEvents"] if e["ph"] == "X"]
    check(len(spans) > 0 and all(e["dur"] >= 0 for e in spans), "the traces hold spans")


def check_rounds(report, repeat, cores):
    """Every measured point took one repetition per round, and every point's round r started
    before any point's round r + 1 (an order, not a duration); the cores were probed before the
    first round and after each."""
    ok = [p for p in report["points"] if p["status"] == "ok"]
    check(report["config"].get("order") == "rounds", "the config records the rounds order")
    check(all(p.get("rounds") == list(range(repeat)) and len(p.get("started_s", [])) == repeat for p in ok),
          f"every measured point has one repetition in each of the {repeat} rounds")
    if all(len(p.get("started_s", [])) == repeat for p in ok):
        ends = [max(p["started_s"][r] for p in ok) for r in range(repeat)]
        starts = [min(p["started_s"][r] for p in ok) for r in range(repeat)]
        check(all(ends[r] < starts[r + 1] for r in range(repeat - 1)),
              "the rounds interleave the points: every round r started before any round r + 1")
    probes = report.get("core_probes", {})
    seen = sorted((q["probe"], q["core"]) for q in probes.get("probes", []))
    check(seen == [(k, c) for k in range(repeat + 1) for c in range(cores)],
          f"each core was probed before the first round and after each ({len(seen)} probes)")
    check(sorted(m["core"] for m in probes.get("medians", [])) == list(range(cores)),
          "the probes give each core's median")


def slowed_sweep(args, validator, out, hook, cores, what):
    """A short serial and stream sweep on `cores` with the probe test hook set to `hook`; its
    stderr and report once it ran and validated."""
    env = dict(os.environ, CNNBENCH_TEST_PROBE_SLOWDOWN=hook)
    sweep = subprocess.run([args.cli, "sweep", "--model", "fc3", "--strategies", "serial,stream", "--cores", cores,
                            "--steps", "3", "--repeat", "3", "--warmup", "0", "--synthetic", "256",
                            "--out", str(out)], env=env, capture_output=True, text=True)
    check(sweep.returncode == 0, f"the sweep with {what} ran" + (f" ({sweep.stderr[-300:]})" if sweep.returncode else ""))
    report = json.loads(out.read_text())
    check(not errors_of(validator, report), f"the sweep with {what} validates against the schema")
    return sweep.stderr, report


def check_slow_core(args, validator, tmp):
    """The test hook slows core (last) at probe 1 (after round 0): the repetitions of rounds 0 and
    1 that used that core carry a slow_core_warning naming it, were retried once, and keep the
    retry exactly when its probes were normal; the closing warning names the cause."""
    cores = os.cpu_count() or 1
    slow = cores - 1
    # Ten times slower, a drop of 0.9: a sweep beside other tests on 2 cores has seen the core's
    # median fall with its other probes, and a 3x slowdown then read as a drop of 0.28.
    stderr, report = slowed_sweep(args, validator, Path(tmp, "slow-core.json"), f"{slow}:1:10", "1",
                                  "a slowed core")
    serial = next(p for p in report["points"] if p["id"] == "fc3/serial/n1c1")
    on_core = [w for w in serial.get("slow_core_warnings", [])
               if w["core"] == slow and w.get("series_core", slow) == slow]
    on_slow = [w for w in on_core if w["probe"] == 1]
    # The baseline's series on the slow core (its only one on a one-core machine) ran in rounds 0
    # and 1, beside probe 1. A repetition names the slower of its two probes: where a test beside
    # this one slowed the core at probe 0 more, round 0's names probe 0, and it is marked all the same.
    marked = {w["round"] for w in on_core}
    check({0, 1} <= marked and 1 in {w["round"] for w in on_slow},
          f"the baseline's repetitions next to the slowed probe are marked ({on_core})")
    check(all(w["drop"] > 0.5 and "compute" in w["dropped"] and "memory" in w["dropped"] for w in on_slow),
          "the warning says how far and in what the core dropped")
    for p in report["points"]:
        for w in p.get("slow_core_warnings", []):
            retry = w.get("retry")
            if retry is None or w["used"] != ("retry" if retry["probe_normal"] else "original"):
                check(False, f"{p['id']} round {w['round']}: retried once, the retry kept only when normal ({w})")
                return
            series = p
            if "series_core" in w:
                series = next(c for c in p["baseline_cores"]["per_core"] if c["core"] == w["series_core"])
            kept = retry["seconds"] if w["used"] == "retry" else w["seconds"]
            if series["times_s"][w["round"]] != kept:
                check(False, f"{p['id']} round {w['round']}: times_s holds the {w['used']}'s time")
                return
    check(True, "every marked repetition was retried, and the retry stands in only when its probes were normal")
    check("warning: repetitions that ran while a core was" in stderr and f"core {slow}'s" in stderr,
          "the sweep's closing warnings name the slow core")


def check_slow_handoff(args, validator, tmp):
    """The test hook makes the last core's handoff with core 0 take 3 times as long at probe 1: the
    probes record each core's round trip past the first, and the repetitions next to that probe
    carry a warning that names the handoff, not compute or memory."""
    cores = os.cpu_count() or 1
    if cores < 2:
        print("note: one core: no handoff between cores to slow")
        return
    slow = cores - 1
    _, report = slowed_sweep(args, validator, Path(tmp, "slow-handoff.json"), f"{slow}:1:3:handoff", "2",
                             "a slowed handoff")
    probes = report["core_probes"]["probes"]
    check(all(("handoff_ns" in p) == (p["core"] > 0) and p.get("handoff_ns", 1) > 0 for p in probes),
          "every probe of a core past the first has its round trip with core 0, the first core none")
    warnings = [w for p in report["points"] for w in p.get("slow_core_warnings", [])
                if w["core"] == slow and w["probe"] == 1]
    # The hook triples one round trip; against a median of steady ones that is a drop of 2/3. A
    # busy core 0 (another job's loop) stretches every round trip by its scheduling, and the
    # median with it: then the drop is smaller, and only its naming is this test's to check.
    others = [p["handoff_ns"] for p in probes if p["core"] == slow and p["probe"] != 1]
    steady = bool(others) and max(others) <= 1.5 * min(others)
    least = 0.5 if steady else 0.2
    if not steady:
        print(f"note: the unslowed round trips of core {slow} ranged {min(others):.0f}-{max(others):.0f} ns: "
              f"a busy machine; the drop is only required above {least}")
    check(bool(warnings) and all("handoff" in w["dropped"] and w["handoff_drop"] > least
                                 and "cache line" in w["message"] for w in warnings),
          f"the repetitions next to the slowed handoff name it ({warnings[:1]})")


def check_interrupted_rounds(args, validator, tmp):
    """SIGINT in the third round: the report keeps every point with the rounds it took, marked
    with rounds_done; --resume measures those points again and completes the sweep."""
    out = Path(tmp, "stopped.json")
    sweep = [args.cli, "sweep", "--model", "fc3", "--strategies", "serial,stream", "--cores", "1,2",
             "--steps", "3", "--repeat", "30", "--warmup", "0", "--synthetic", "256", "--out", str(out)]
    child = subprocess.Popen(sweep, stderr=subprocess.PIPE, text=True)
    for line in child.stderr:
        if line.startswith("round 3/"):
            child.send_signal(signal.SIGINT)
            break
    child.communicate()
    check(child.returncode == 130, f"the stopped sweep exits 130 ({child.returncode})")
    report = json.loads(out.read_text())
    check(not errors_of(validator, report), "the stopped sweep's report validates")
    ok = [p for p in report["points"] if p["status"] == "ok"]
    check(report["interrupted"] and not report["complete"] and ok, "the stopped sweep is marked interrupted")
    check(all(2 <= p.get("rounds_done", 0) < 30 and len(p["times_s"]) == p["rounds_done"]
              and p["rounds"] == list(range(p["rounds_done"])) for p in ok),
          f"each point keeps the rounds it took, marked ({[p.get('rounds_done') for p in ok]})")
    resumed = subprocess.run(sweep + ["--resume", "--quiet"], capture_output=True, text=True)
    report = json.loads(out.read_text())
    ok = [p for p in report["points"] if p["status"] == "ok"]
    check(resumed.returncode == 0 and report["complete"], "--resume completes the stopped sweep")
    check(all("rounds_done" not in p and p["rounds"] == list(range(30)) for p in ok),
          "--resume measured the partly measured points again, in every round")


def main():
    args = parse_arguments()
    source = Path(args.source)
    validator = schema_validator(source, "sweep-report")

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "tiny.json")
        traces = Path(tmp, "traces")
        sweep = [args.cli, "sweep", "--model", "fc3", "--steps", "3", "--repeat", "3", "--warmup", "1",
                 "--cores", "1,2", "--nodes", "1", "--strategies", "serial,blas,stream,gpu",
                 "--synthetic", "512", "--target-accuracy", "0.3", "--eval-every", "5",
                 "--tta-max-steps", "10", "--quiet", "--trace-dir", str(traces), "--out", str(out)]
        subprocess.run(sweep, check=True)
        report = json.loads(out.read_text())
        errors = errors_of(validator, report)
        for e in errors:
            print(f"     {'/'.join(map(str, e.path))}: {e.message}")
        check(not errors, "the tiny sweep validates against the schema")
        check(report["complete"] and not report["interrupted"], "the sweep is marked complete")
        ids = [p["id"] for p in report["points"]]
        check(ids[0] == "fc3/serial/n1c1", "the serial baseline comes first")
        check({"fc3/blas/n1c2", "fc3/stream/n1c2", "fc3/gpu/n1c1"} <= set(ids), "every point is listed")
        ok = [p for p in report["points"] if p["status"] == "ok"]
        check(all(len(p["times_s"]) == 3 and len(p["warmup_times_s"]) == 1 for p in ok),
              "every measured point keeps 3 raw repetitions and 1 warm-up")
        check_rounds(report, 3, os.cpu_count() or 1)
        check_breakdowns(ok, traces)
        serial = next(p for p in ok if p["strategy"] == "serial")
        for p in ok:
            unpaired = serial["time"]["median"] / p["time"]["median"]
            expected = unpaired
            if p is not serial:
                pair = p.get("paired_baseline")
                if pair is None or len(pair["times_s"]) != 3 or len(pair["warmup_times_s"]) != 1:
                    check(False, f"{p['id']}: 3 paired serial repetitions and 1 warm-up")
                    break
                ratios = [b / t for b, t in zip(pair["times_s"], p["times_s"])]
                if any(abs(r - q) > 1e-9 * r for r, q in zip(ratios, pair["ratios"])):
                    check(False, f"{p['id']}: paired ratios are T_serial,i / T_p,i")
                    break
                expected = statistics.median(ratios)
            if (abs(p["speedup"] - expected) > 1e-9 * expected or abs(p["efficiency"] - expected / p["p"]) > 1e-9
                    or abs(p["speedup_unpaired"] - unpaired) > 1e-9 * unpaired):
                check(False, f"{p['id']}: speedup/efficiency are the median paired T_serial/T_p and S/p")
                break
        else:
            check(True, "speedup = median of paired T_serial / T_p, efficiency = S / p on every point")
        cores = report["context"]["cores"]
        if cores >= 2:
            base = serial["baseline_cores"]
            per_core = {c["core"]: c for c in base["per_core"]}
            check(sorted(per_core) == [0, cores - 1], "the serial baseline ran on the first and the last core")
            fastest = min(per_core.values(), key=lambda c: statistics.median(c["times_s"]))
            check(base["chosen"] == fastest["core"] and serial["times_s"] == fastest["times_s"],
                  "the baseline's times are those of its faster core")
            check(all(p["core"] == base["chosen"] for p in serial["pin_map"]),
                  "the baseline's pin map is that of the chosen core")
        check(all("time_to_accuracy" in p and p["time_to_accuracy"]["curve"] for p in ok),
              "every measured point has a time-to-accuracy curve")
        gpu = next(p for p in report["points"] if p["strategy"] == "gpu")
        check(gpu["status"] in ("skipped", "ok") and (gpu["status"] == "ok" or gpu["reason"]),
              "gpu is measured or skipped with its reason")

        broken = copy.deepcopy(report)
        broken["points"][0]["times_s"] = []
        del broken["points"][1]["time"]
        check(not validator.is_valid(broken), "the schema rejects a point without repetitions or time")

        same = subprocess.run([args.cli, "compare", str(out), str(out)], capture_output=True, text=True)
        check(same.returncode == 0, "compare passes the report against itself")
        slow = copy.deepcopy(report)
        for p in slow["points"]:
            if p["status"] == "ok":
                p["times_s"] = [2 * t for t in p["times_s"]]
                for k in ("median", "min", "max", "mean", "mad"):
                    p["time"][k] *= 2
        slow_path = Path(tmp, "slow.json")
        slow_path.write_text(json.dumps(slow))
        caught = subprocess.run([args.cli, "compare", str(out), str(slow_path)], capture_output=True, text=True)
        check(caught.returncode == 1 and "REGRESSION" in caught.stdout, "compare catches a 2x slowdown")

        # --resume: drop a measured point, mark incomplete; the rerun measures only it.
        partial = copy.deepcopy(report)
        dropped = next(p for p in partial["points"] if p["id"] == "fc3/stream/n1c2")
        partial["points"].remove(dropped)
        partial["complete"] = False
        out.write_text(json.dumps(partial))
        subprocess.run(sweep + ["--resume"], check=True)
        resumed = json.loads(out.read_text())
        check([p["id"] for p in resumed["points"]] == ids and resumed["complete"],
              "--resume finishes a partial sweep with every point")
        kept = {p["id"]: p.get("times_s") for p in resumed["points"]}
        check(all(kept[p["id"]] == p.get("times_s") for p in partial["points"]),
              f"--resume keeps the finished points ({dropped['id']} was rerun)")
        different = subprocess.run(sweep[:-2] + ["--out", str(out), "--resume", "--batch", "32"],
                                   capture_output=True, text=True)
        check(different.returncode == 1 and "--resume" in different.stderr,
              "--resume refuses a report made with other settings")

        plots = Path(tmp, "plots")
        subprocess.run([args.cli, "plot", str(out), "--out", str(plots)], check=True, capture_output=True)
        names = ["speedup", "efficiency", "throughput", "time_to_accuracy", "scaling_prediction", "breakdown"]
        missing = [f"{n}.{e}" for n in names for e in ("png", "svg")
                   if not (plots / f"{n}.{e}").is_file() or (plots / f"{n}.{e}").stat().st_size < 1000]
        check(not missing, f"plot draws every image as PNG and SVG (missing: {missing})")
        png = (plots / "speedup.png").read_bytes()[:8]
        check(png == b"\x89PNG\r\n\x1a\n", "speedup.png is a PNG")

        # Without --steps each point calibrates its own; the report still validates, and the
        # unpaired speedup compares times per image when the point and the baseline differ.
        calibrated = Path(tmp, "calibrated.json")
        subprocess.run([args.cli, "sweep", "--model", "fc3", "--strategies", "serial,stream", "--cores", "1",
                        "--repeat", "1", "--warmup", "0", "--synthetic", "256", "--min-time", "0.05",
                        "--quiet", "--out", str(calibrated)], check=True)
        report = json.loads(calibrated.read_text())
        errors = errors_of(validator, report)
        for e in errors:
            print(f"     {'/'.join(map(str, e.path))}: {e.message}")
        check(not errors, "a calibrated sweep validates against the schema")
        ok = {p["id"]: p for p in report["points"] if p["status"] == "ok"}
        serial, stream = ok.get("fc3/serial/n1c1"), ok.get("fc3/stream/n1c1")
        check(serial is not None and stream is not None, "the calibrated sweep measured both points")
        if serial and stream:
            per_image = [p["time"]["median"] / (p["steps"] * p["batch"]) for p in (serial, stream)]
            check(abs(stream["speedup_unpaired"] - per_image[0] / per_image[1]) < 1e-9 * stream["speedup_unpaired"],
                  "the unpaired speedup is a ratio of times per image")

        check_slow_core(args, validator, tmp)
        check_slow_handoff(args, validator, tmp)
        check_interrupted_rounds(args, validator, tmp)

    reference = source / "tests/data/sweep-2core.json"
    if reference.exists():
        errors = errors_of(validator, json.loads(reference.read_text()))
        check(not errors, "the committed reference sweep validates")
    print(f"{len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
