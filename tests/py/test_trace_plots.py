#!/usr/bin/env python3
"""plot --trace draws one step of a synthetic trace (the last step every track has, its flows) as
a Gantt chart, and refuses a trace without events or a file that is not JSON with one clear line,
exit 1 and nothing written; plot draws breakdown.png from a sweep report whose points carry
breakdowns; sweep --trace-dir refuses a file where its folder should be and a trace that would
overwrite the report, before measuring anything."""
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import FAILURES, check, parse_arguments


def span(pid, tid, ts, dur, cat, name, step=None, **args):
    event = {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "cat": cat, "name": name}
    if step is not None:
        event["args"] = {"step": step, **args}
    return event


def synthetic_trace():
    """Two ranks, three tracks, a stream-like format: actor-named spans with args {step,
    micro_batch, copy}, a flow from each step's last compute of rank 0 to rank 1, and a counter.
    Steps 1-4 on two tracks, 1-3 on the third: the step to draw is 3."""
    events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0"}},
              {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "rank 1"}},
              {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "stage c1"}},
              {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "stage f1"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 0, "args": {"name": "thread 0"}}]
    for step in range(1, 5):
        t = 1000.0 * step
        events += [span(0, 0, t, 50, "data_s", "data", step, micro_batch=0, copy=0),
                   span(0, 0, t + 50, 400, "compute_s", "c1", step, micro_batch=0, copy=0),
                   span(0, 1, t, 100, "starvation_s", "wait", step),
                   span(0, 1, t + 100, 300, "compute_s", "f1", step, micro_batch=0, copy=0),
                   span(0, 1, t + 400, 100, "update_s", "update", step)]
        events += [{"ph": "s", "id": step, "cat": "message", "name": "send", "pid": 0, "tid": 0, "ts": t + 450},
                   {"ph": "f", "id": step, "cat": "message", "name": "send", "pid": 1, "tid": 0, "ts": t + 600,
                    "bp": "e"},
                   {"ph": "C", "name": "tokens", "pid": 0, "ts": t, "args": {"queued": step}},
                   {"ph": "C", "name": "tokens", "pid": 0, "ts": t + 300, "args": {"queued": step + 2}}]
        if step < 4:
            events += [span(1, 0, t, 200, "communication_exposed_s", "allreduce", step),
                       span(1, 0, t + 200, 300, "compute_s", "f1", step),
                       span(1, 0, t + 500, 300, "imbalance_wait_s", "wait", step)]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def plot(cli, *words):
    return subprocess.run([cli, "plot", *map(str, words)], capture_output=True, text=True)


def image_ok(path):
    if not path.is_file() or path.stat().st_size < 2000:
        return False
    head = path.read_bytes()[:200]
    return head.startswith(b"\x89PNG\r\n\x1a\n") if path.suffix == ".png" else b"<svg" in path.read_bytes()[:2000]


def check_gantt(cli, tmp):
    trace = tmp / "run.trace.json"
    trace.write_text(json.dumps(synthetic_trace()))
    out = tmp / "gantt"
    drawn = plot(cli, "--trace", trace, "--out", out)
    check(drawn.returncode == 0, f"plot --trace draws a synthetic trace ({drawn.stderr.strip()})")
    check(all(image_ok(out / f"run.trace-gantt.{ext}") for ext in ("png", "svg")),
          "the Gantt chart is a PNG and an SVG named after the trace")
    check("step 3" in drawn.stdout and "3 tracks" in drawn.stdout,
          f"the chart shows step 3, the last one every track has (all as long), on 3 tracks ({drawn.stdout.strip()})")
    check("1 flows" in drawn.stdout, "the flow of the drawn step is drawn, those of other steps are not")
    # A last step far longer than the others (a run's last step closes its last range) is not
    # the one drawn: the chart shows the last step of median duration.
    outlier = synthetic_trace()
    for e in outlier["traceEvents"]:
        if e.get("ph") == "X" and e["args"]["step"] == 3 and e["pid"] == 1:
            e["dur"] += 5000
    trace.write_text(json.dumps(outlier))
    drawn = plot(cli, "--trace", trace, "--out", out, "--force")  # over the chart just drawn
    check(drawn.returncode == 0 and "step 2" in drawn.stdout,
          f"with step 3 an outlier the chart shows step 2, the last typical one ({drawn.stdout.strip()})")
    check("1 counters" in drawn.stdout, "the counter is drawn below the tracks")

    unstepped = synthetic_trace()
    for event in unstepped["traceEvents"]:
        event.pop("args", None) if event.get("ph") == "X" else None
    plain = tmp / "plain.json"
    plain.write_text(json.dumps(unstepped))
    drawn = plot(cli, "--trace", plain, "--out", out)
    check(drawn.returncode == 0 and "between the last two updates" in drawn.stdout,
          f"without step numbers the last step lies between the last two updates ({drawn.stdout.strip()})")

    for name, content, expected in [
            ("empty.json", json.dumps({"traceEvents": []}), "no complete events"),
            ("metadata.json", json.dumps({"traceEvents": synthetic_trace()["traceEvents"][:5]}), "no complete events"),
            ("text.json", "not a trace at all\n", "invalid JSON"),
            ("object.json", json.dumps({"points": []}), "not a Chrome trace")]:
        bad = tmp / name
        bad.write_text(content)
        target = tmp / f"out-{name}"
        refused = plot(cli, "--trace", bad, "--out", target)
        lines = refused.stderr.strip().splitlines()
        check(refused.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"cnnbench: error: {bad}")
              and expected in lines[0], f"{name}: one line naming the file and '{expected}' ({refused.stderr.strip()})")
        check(not target.exists() or not any(target.iterdir()), f"{name}: nothing is written")
    both = plot(cli, tmp / "report.json", "--trace", trace, "--out", out)
    check(both.returncode == 2, "a report and --trace together are a usage error")


def check_breakdown(cli, source, tmp):
    """The committed reference report, its points given breakdowns whose stacks are known."""
    report = json.loads((source / "tests/data/sweep-2core.json").read_text())
    plots = tmp / "plots"
    drawn = plot(cli, source / "tests/data/sweep-2core.json", "--out", plots)
    check(drawn.returncode == 0 and image_ok(plots / "breakdown.png"),
          "a report without breakdowns still gets breakdown.png (saying so)")
    with_breakdowns = copy.deepcopy(report)
    for p in with_breakdowns["points"]:
        if p["status"] != "ok":
            continue
        wall = p["time"]["median"]
        p["time_breakdown"] = {"wall_s": wall, "busy_s": 0.8 * wall, "compute_s": 0.6 * wall, "update_s": 0.1 * wall,
                               "reduce_s": 0.0, "data_s": 0.1 * wall, "communication_exposed_s": 0.1 * wall,
                               "imbalance_wait_s": 0.05 * wall, "pipeline_bubble_s": 0.05 * wall,
                               "pipeline_bubble": {"fill_drain_s": 0.03 * wall, "starvation_s": 0.02 * wall},
                               "other_s": 0.0, "steps": p["steps"], "per_layer": {}, "workers": []}
        p["straggler"] = {"kind": "thread", "id": 0, "mean_excess": 1.0}
        p["median_repetition"] = 0
    with_breakdowns["points"][-1]["noise_warning"] = "thread 1 lost 20% of its wall time (0.1 of 0.5 s) to descheduling"
    path = tmp / "with-breakdowns.json"
    path.write_text(json.dumps(with_breakdowns))
    plots2 = tmp / "plots2"
    drawn = plot(cli, path, "--out", plots2)
    check(drawn.returncode == 0 and all(image_ok(plots2 / f"breakdown.{ext}") for ext in ("png", "svg")),
          f"plot draws breakdown.png and .svg from points with breakdowns ({drawn.stderr.strip()})")
    check((plots2 / "breakdown.png").read_bytes() != (plots / "breakdown.png").read_bytes(),
          "the breakdowns change the picture")


def check_trace_dir(cli, tmp):
    sweep = [cli, "sweep", "--model", "fc3", "--strategies", "serial", "--steps", "2", "--repeat", "1",
             "--warmup", "0", "--synthetic", "256", "--quiet"]
    taken = tmp / "taken"
    taken.write_text("a file\n")
    refused = subprocess.run(sweep + ["--out", str(tmp / "s.json"), "--trace-dir", str(taken)],
                             capture_output=True, text=True)
    check(refused.returncode != 0 and "--trace-dir" in refused.stderr and "not a folder" in refused.stderr
          and not (tmp / "s.json").exists(), f"--trace-dir naming a file is refused ({refused.stderr.strip()})")
    traces = tmp / "traces"
    clash = subprocess.run(sweep + ["--out", str(traces / "fc3-serial-n1c1.json"), "--trace-dir", str(traces)],
                           capture_output=True, text=True)
    check(clash.returncode == 1 and "same file" in clash.stderr and not traces.exists(),
          f"a trace that would overwrite the report is refused before any point ({clash.stderr.strip()})")


def main():
    args = parse_arguments()
    probe = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True)
    if probe.returncode != 0:
        print("SKIP: /usr/bin/python3 has no matplotlib")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        check_gantt(args.cli, tmp)
        check_breakdown(args.cli, Path(args.source), tmp)
        check_trace_dir(args.cli, tmp)
    print(f"{len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
