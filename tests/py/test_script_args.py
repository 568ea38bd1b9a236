#!/usr/bin/env python3
"""The shell scripts check their numbers before they change anything (scripts/check_args.sh):
a value that is not a whole number in range (a word, a sign, an exponent, a huge number that
bash's 64-bit arithmetic would wrap into range, control bytes) is refused with exit 2 and one line
naming the option and its bounds, no raw control byte reaches the terminal, and nothing is
written; a leading zero is decimal, not octal. Runs datasets/shard.sh on a tiny IDX set of its
own, and the argument checks of scripts/emulate-hosts.sh (which refuse before they need root) and
of the bench scripts (which refuse before they look for a cnnbench). Every script answers -h and
--help with what it does and starts nothing; scripts that take no options refuse one, and
scripts/gpu-deps.sh never empties a folder it did not make."""
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import check, exit_code, parse_arguments

BAD = ["0", "-1", "abc", "", "1e3", "3.5", "18446744073709551617", "99999999999999999999",
       "3\x1b[31m\x07"]


def idx_set(folder, count):
    """The four MNIST files, `count` training images of 2 x 2 pixels, 1 test image."""
    folder.mkdir(parents=True)
    for prefix, n in (("train", count), ("t10k", 1)):
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 0x803, n, 2, 2) + bytes(range(4)) * n)
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))


def run(argv, cwd):
    return subprocess.run(argv, cwd=cwd, capture_output=True, timeout=60)


def refused_cleanly(result, what, option, bounds, work, before, message=None):
    err = result.stderr.decode(errors="replace")
    check(result.returncode == 2, f"{what}: exit 2 (got {result.returncode})")
    lines = err.strip().splitlines()
    check(len(lines) == 1, f"{what}: one line on stderr (got {len(lines)}: {err!r})")
    message = message or f"{option} takes a whole number from {bounds}"
    check(message in err, f"{what}: says {message!r}: {err!r}")
    raw = [b for b in result.stdout + result.stderr if b < 0x20 and b not in (0x0A,)]
    check(not raw, f"{what}: no raw control byte on stdout or stderr ({raw[:4]})")
    check(sorted(os.listdir(work)) == before, f"{what}: nothing written")


def main():
    args = parse_arguments()
    source = Path(args.source).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        idx_set(work / "mnist", 10)
        shard = str(source / "datasets" / "shard.sh")
        before = sorted(os.listdir(work))
        for value in BAD:
            result = run([shard, "--from", str(work / "mnist"), value, str(work / "out")], work)
            refused_cleanly(result, f"shard.sh N={value!r}", "N", "1 to 999999999", work, before,
                            "unknown option '-1'" if value == "-1" else None)
        # A leading zero is decimal: 08 blocks, not a bash octal error.
        result = run([shard, "--from", str(work / "mnist"), "08", str(work / "out")], work)
        check(result.returncode == 0, f"shard.sh 08: exit 0 ({result.stderr.decode(errors='replace')!r})")
        check(sorted(p.name for p in (work / "out").glob("shard-*")) == [f"shard-{i}" for i in range(8)],
              "shard.sh 08: 8 blocks")
        result = run([shard, "--from", str(work / "mnist"), "11", str(work / "out2")], work)
        check(result.returncode != 0 and not (work / "out2").exists(),
              "shard.sh 11 of 10 samples: refused, nothing written")

        hosts = str(source / "scripts" / "emulate-hosts.sh")
        before = sorted(os.listdir(work))
        for value in BAD + ["251"]:
            result = run([hosts, "up", value, "--dir", str(work / "hosts")], work)
            refused_cleanly(result, f"emulate-hosts.sh up {value!r}", "up N", "1 to 250", work, before)
        for value in ("0", "x", "18446744073709551617"):
            result = run([hosts, "up", "2", "--slots", value, "--dir", str(work / "hosts")], work)
            refused_cleanly(result, f"emulate-hosts.sh --slots {value!r}", "--slots", "1 to 4096", work, before)

        bench = source / "bench"
        for script, option, bounds in (("peer_vs_plain.sh", "--pairs", "1 to 100"),
                                       ("serial_vs_pytorch.sh", "--pairs", "1 to 100"),
                                       ("breakdown_figures.sh", "--repeat", "1 to 100"),
                                       ("gpipe_bubble.sh", "--reps", "1 to 100"),
                                       ("cluster_over_hosts.sh", "--rounds", "1 to 100")):
            for value in ("0", "abc", "18446744073709551617", "\x1b]0;x\x07"):
                result = run([str(bench / script), "--cli", args.cli, option, value], work)
                refused_cleanly(result, f"{script} {option} {value!r}", option, bounds, work, before)

        # The Python bench scripts (argparse, bench/bench_common.py): exit 2, the option and its
        # bounds named, no raw control byte, nothing written.
        for script, option, bounds in (("serial_limit.py", "--runs", "1..50"),
                                       ("tune_vs_exhaustive.py", "--repeat", "1..100")):
            for value in ("0", "abc", "18446744073709551617", "\x1b]0;x\x07"):
                result = run([sys.executable, str(bench / script), "--out", str(work / "out.json"),
                              "--cli", args.cli, option, value], work)
                err = result.stderr.decode(errors="replace")
                what = f"{script} {option} {value!r}"
                check(result.returncode == 2, f"{what}: exit 2 (got {result.returncode})")
                check(f"argument {option}:" in err and ("is outside " + bounds in err or "is not a whole number" in err),
                      f"{what}: names {option} and why: {err[-200:]!r}")
                raw = [b for b in result.stdout + result.stderr if b < 0x20 and b not in (0x0A,)]
                check(not raw, f"{what}: no raw control byte on stdout or stderr ({raw[:4]})")
                check(sorted(os.listdir(work)) == before, f"{what}: nothing written")
            result = run([sys.executable, str(bench / script), "-h"], work)
            check(result.returncode == 0 and b"Usage" not in result.stderr and len(result.stdout.splitlines()) >= 3,
                  f"{script} -h: exit 0 and what it does")

        # -h/--help answers on every script a user runs, and starts nothing: no install, no build,
        # no test run, no folder named "--help".
        runnable = sorted(p for folder in ("scripts", "bench", "datasets")
                          for p in (source / folder).glob("*.sh") if os.access(p, os.X_OK))
        check(len(runnable) >= 15, f"{len(runnable)} runnable scripts found")
        for script in runnable:
            for flag in ("-h", "--help"):
                result = run([str(script), flag], work)
                out = result.stdout.decode(errors="replace")
                check(result.returncode == 0 and len(out.strip().splitlines()) >= 2,
                      f"{script.relative_to(source)} {flag}: exit 0 and what it does "
                      f"(got {result.returncode}: {out[:80]!r} {result.stderr[:120]!r})")
        check(sorted(os.listdir(work)) == before, "--help wrote nothing")
        result = run([str(source / "scripts" / "run.sh"), "now"], work)
        refused_cleanly(result, "run.sh now", None, None, work, before, "takes no arguments, not 'now'")
        deps = str(source / "scripts" / "gpu-deps.sh")
        result = run([deps, "--all"], work)
        refused_cleanly(result, "gpu-deps.sh --all", None, None, work, before, "unknown option '--all'")
        # A folder it did not make is never emptied: not the data, not the checkout.
        (work / "mnist" / "keep").write_text("mine")
        before = sorted(os.listdir(work))
        for folder in (work / "mnist", source):
            result = run([deps, str(folder)], work)
            refused_cleanly(result, f"gpu-deps.sh {folder.name}", None, None, work, before,
                            "is a folder this script did not make")
        check((work / "mnist" / "keep").read_text() == "mine", "gpu-deps.sh left mnist/ as it was")
        result = run([str(source / "scripts" / "refresh-results.sh"), "--cli", args.cli], work)
        refused_cleanly(result, "refresh-results.sh without --force", None, None, work, before,
                        "pass --force to do so")
        result = run([str(source / "scripts" / "gpu-check.sh"), "--out"], work)
        refused_cleanly(result, "gpu-check.sh --out", None, None, work, before, "unknown option '--out'")
        check(not (work / "--out").exists(), "gpu-check.sh made no folder '--out'")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
