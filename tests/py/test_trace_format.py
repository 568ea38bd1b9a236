#!/usr/bin/env python3
"""`cnnbench train --trace FILE --trace-steps 5` keeps exactly the last 5 whole steps on every
track (serial, stream on 2 cores, cluster 1 x 2, and 2 x 1 under mpirun when there is one), and
the file is a well-formed Chrome trace: complete events with ts >= 0 and dur >= 0 that nest on
each track, args.step on every one, spans named by the stream's actors (the names the run report
lists), every flow start with its finish and back, numeric counters, and MPI calls with their
bytes. The checker is run on deliberately broken traces too, and must reject each one."""
import collections
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import parse_arguments

STEPS = 30
KEPT = 5


def format_problems(trace):
    """Everything wrong with a trace's format, as sentences (empty: none)."""
    problems = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    tracks = collections.defaultdict(list)
    flow_starts, flow_ends = collections.Counter(), collections.Counter()
    for i, event in enumerate(events):
        phase = event.get("ph")
        if phase == "X":
            ts, dur = event.get("ts"), event.get("dur")
            if not isinstance(ts, (int, float)) or ts < 0:
                problems.append(f"event {i}: ts {ts!r} is not a number >= 0")
                continue
            if not isinstance(dur, (int, float)) or dur < 0:
                problems.append(f"event {i}: dur {dur!r} is not a number >= 0")
                continue
            if not isinstance(event.get("args", {}).get("step"), int):
                problems.append(f"event {i} ({event.get('name')}): no integer args.step")
            if not isinstance(event.get("cat"), str) or not event["cat"].endswith("_s"):
                problems.append(f"event {i}: cat {event.get('cat')!r} is no category key")
            tracks[(event.get("pid"), event.get("tid"))].append((ts, ts + dur, event.get("name")))
        elif phase in ("s", "f"):
            (flow_starts if phase == "s" else flow_ends)[event.get("id")] += 1
            if phase == "f" and event.get("bp") != "e":
                problems.append(f"event {i}: a flow finish without bp 'e'")
        elif phase == "C":
            args = event.get("args")
            if not args or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                   for v in args.values()):
                problems.append(f"event {i}: counter {event.get('name')!r} args {args!r} not numeric")
            if not isinstance(event.get("ts"), (int, float)) or event["ts"] < 0:
                problems.append(f"event {i}: counter ts {event.get('ts')!r}")
    for track, spans in tracks.items():
        problems += nesting_problems(track, spans)
    for flow_id in set(flow_starts) | set(flow_ends):
        if flow_starts[flow_id] != 1 or flow_ends[flow_id] != 1:
            problems.append(f"flow {flow_id}: {flow_starts[flow_id]} start(s), "
                            f"{flow_ends[flow_id]} finish(es)")
    return problems


def nesting_problems(track, spans):
    """Spans of one track either nest or follow each other; a partial overlap is a problem.
    Timestamps are microseconds printed from nanoseconds: 1 ns of slack for rounding."""
    slack = 1e-3
    problems = []
    open_ends = []
    for start, end, name in sorted(spans, key=lambda s: (s[0], -s[1])):
        while open_ends and open_ends[-1][0] <= start + slack:
            open_ends.pop()
        if open_ends and end > open_ends[-1][0] + slack:
            problems.append(f"track {track}: {name} [{start}, {end}] overlaps "
                            f"{open_ends[-1][1]} ending at {open_ends[-1][0]}")
        open_ends.append((end, name))
    return problems


def steps_by_track(trace):
    steps = collections.defaultdict(collections.Counter)
    for event in trace["traceEvents"]:
        if event.get("ph") == "X":
            steps[(event["pid"], event["tid"])][event["args"]["step"]] += 1
    return steps


def run(cli, args, tmp, name, launcher=()):
    trace_path, report_path = Path(tmp, name + ".trace.json"), Path(tmp, name + ".report.json")
    command = [*launcher, cli, "train", "--model", "lenet5", "--synthetic", "512", "--batch", "32",
               "--steps", str(STEPS), "--no-pin", "--trace", str(trace_path), "--trace-steps",
               str(KEPT), "--report", str(report_path), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")
    return json.loads(trace_path.read_text()), json.loads(report_path.read_text())


class Check:
    def __init__(self):
        self.failures = 0

    def that(self, condition, what):
        if not condition:
            print(f"FAIL: {what}")
            self.failures += 1


def check_kept_steps(check, name, trace, tracks_expected):
    """Exactly the last KEPT steps on every track, the same ones."""
    steps = steps_by_track(trace)
    check.that(len(steps) == tracks_expected, f"{name}: {len(steps)} tracks, expected {tracks_expected}")
    for track, counts in steps.items():
        check.that(sorted(counts) == list(range(STEPS - KEPT, STEPS)),
                   f"{name}: track {track} keeps steps {sorted(counts)}")


def check_serial(check, trace):
    """A serial step gathers its batch first and updates last: every kept step is whole when it
    starts with data, ends with update and has each layer's forward and backward."""
    check_kept_steps(check, "serial", trace, 1)
    by_step = collections.defaultdict(list)
    for event in trace["traceEvents"]:
        if event.get("ph") == "X":
            by_step[event["args"]["step"]].append((event["ts"], event["name"]))
    for step, spans in by_step.items():
        names = [name for _, name in sorted(spans)]
        check.that(names[0] == "data" and "update" in names[-2:],
                   f"serial step {step} runs {names[0]} .. {names[-1]}")
        for layer in ("c1", "c2", "f1", "f2", "f3"):
            check.that(names.count(layer) == 2, f"serial step {step}: {layer} {names.count(layer)} times")


def check_stream(check, trace, report):
    """Each actor fires firings/steps times a step (the report's count) on the core the report
    places it on, in every kept step; flows and queue-depth counters are there."""
    check_kept_steps(check, "stream", trace, 2)
    metrics = report["strategy_metrics"]
    actors = {a["name"]: a for a in metrics["actors"]}
    per_step = collections.Counter()
    for event in trace["traceEvents"]:
        if event.get("ph") == "X" and event["name"] in actors:
            actor = actors[event["name"]]
            per_step[(event["name"], event["args"]["step"])] += 1
            check.that(event["tid"] == actor["core"],
                       f"stream: {event['name']} on track {event['tid']}, report says core {actor['core']}")
    check.that(len({name for name, _ in per_step}) == len(actors),
               f"stream: {len({name for name, _ in per_step})} of {len(actors)} actors have spans")
    for name, actor in actors.items():
        if actor["firings"] % STEPS:
            continue  # an init schedule's firings on top: no per-step count to compare
        for step in range(STEPS - KEPT, STEPS):
            check.that(per_step[(name, step)] == actor["firings"] // STEPS,
                       f"stream: {name} fired {per_step[(name, step)]} times in step {step}, "
                       f"{actor['firings'] // STEPS} a step in the report")
    phases = collections.Counter(e["ph"] for e in trace["traceEvents"])
    check.that(phases["s"] > 0 and phases["C"] > 0, f"stream: no flows or counters ({dict(phases)})")
    # An actor firing k times per micro-batch of a step says which micro-batch each firing was.
    micro_batches = metrics["microbatches"]
    actor_spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] in actors]
    for event in actor_spans:
        per_step_firings = actors[event["name"]]["firings"] // STEPS
        if actors[event["name"]]["firings"] % STEPS == 0 and per_step_firings % micro_batches == 0:
            check.that(0 <= event["args"].get("micro_batch", -1) < micro_batches,
                       f"stream: {event['name']} without a micro_batch in [0, {micro_batches})")
    check.that(not any(e["name"] == "compute" for e in actor_spans), "stream: a bare 'compute' span")


def check_cluster_threads(check, trace):
    check_kept_steps(check, "cluster 1x2", trace, 2)
    for track, counts in steps_by_track(trace).items():
        check.that(len(set(counts.values())) <= 2,
                   f"cluster 1x2: track {track} has steps of {sorted(set(counts.values()))} spans")


def check_cluster_ranks(check, trace):
    """Every MPI call span has its bytes, and the ranks' spans are on one clock."""
    check_kept_steps(check, "cluster 2x1", trace, 2)
    calls = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("MPI_")]
    check.that(calls, "cluster 2x1: no MPI call spans")
    check.that(all(isinstance(e["args"].get("bytes"), int) for e in calls),
               "cluster 2x1: an MPI call span without args.bytes")
    check.that(any(e["args"]["bytes"] > 0 for e in calls), "cluster 2x1: no MPI call moved bytes")
    # Causality on rank 0's clock: no rank's wait for a step's last sum can end before every
    # rank started that sum. Spans moved by a wrong clock offset break it (50 us of slack: the
    # offset is good to half a round trip).
    started, waited = {}, {}
    for e in calls:
        key = (e["pid"], e["args"]["step"])
        if e["name"] in ("MPI_Iallreduce loss and times", "MPI_Iallreduce+wait loss and times"):
            started[key] = e["ts"]
        if e["name"] in ("MPI_Testall wait for sums", "MPI_Iallreduce+wait loss and times"):
            waited[key] = e["ts"] + e["dur"]
    check.that(started and waited, "cluster 2x1: no sum of the loss and times")
    for (rank, step), end in waited.items():
        for other in (0, 1):
            start = started.get((other, step))
            check.that(start is not None and start <= end + 50,
                       f"cluster 2x1 step {step}: rank {rank}'s wait ends at {end} us, before rank "
                       f"{other} started the sum at {start} us")


def expect_rejected(check, good, name, break_it):
    broken = copy.deepcopy(good)
    break_it(broken["traceEvents"])
    check.that(format_problems(broken), f"the checker accepted a trace with {name}")


def check_the_checker(check, good):
    """Broken copies of a good stream trace: each must be rejected."""
    def first(events, phase):
        return next(e for e in events if e.get("ph") == phase)

    def overlap(events):
        a = next(e for e in events if e.get("ph") == "X" and e["dur"] > 5)
        events.append(dict(a, ts=a["ts"] + a["dur"] / 2, dur=a["dur"], name="straddling"))

    expect_rejected(check, good, "a negative duration", lambda ev: first(ev, "X").update(dur=-1.0))
    expect_rejected(check, good, "a negative timestamp", lambda ev: first(ev, "X").update(ts=-5.0))
    expect_rejected(check, good, "a partial overlap", overlap)
    expect_rejected(check, good, "a flow start without its finish",
                    lambda ev: ev.remove(first(ev, "f")))
    expect_rejected(check, good, "a flow finish without its start",
                    lambda ev: ev.remove(first(ev, "s")))
    expect_rejected(check, good, "a text counter",
                    lambda ev: first(ev, "C")["args"].update(tokens="3"))
    expect_rejected(check, good, "a span without its step",
                    lambda ev: first(ev, "X")["args"].pop("step"))


def main():
    args = parse_arguments()
    check = Check()
    with tempfile.TemporaryDirectory() as tmp:
        serial, _ = run(args.cli, [], tmp, "serial")
        stream, stream_report = run(args.cli, ["--strategy", "stream", "--cores", "2"], tmp, "stream")
        cluster, _ = run(args.cli, ["--strategy", "cluster", "--threads", "2"], tmp, "cluster")
        traces = {"serial": serial, "stream": stream, "cluster 1x2": cluster}
        mpirun = shutil.which("mpirun")
        if mpirun:
            env_flags = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
            traces["cluster 2x1"], _ = run(args.cli, ["--strategy", "cluster"], tmp, "ranks",
                                           launcher=[mpirun, *env_flags, "-n", "2"])
        else:
            print("note: no mpirun: the 2-rank trace is left out")
        for name, trace in traces.items():
            for problem in format_problems(trace):
                check.that(False, f"{name}: {problem}")
        check_serial(check, serial)
        check_stream(check, stream, stream_report)
        check_cluster_threads(check, cluster)
        if "cluster 2x1" in traces:
            check_cluster_ranks(check, traces["cluster 2x1"])
        check_the_checker(check, stream)
    if check.failures:
        print(f"{check.failures} failure(s)")
        return 1
    print("traces: 5 whole steps per track, well-formed; the checker rejects broken ones")
    return 0


if __name__ == "__main__":
    sys.exit(main())
