#!/usr/bin/env python3
"""README.md's generated figures agree with the committed results (scripts/readme_tables.py
--check), and the check can fail: a copy of the results with one number changed makes it name
the part, and --write then puts the new number in that part alone, leaving the rest of the file
as it was."""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import check, exit_code, parse_arguments


def tables(source, *argv):
    return subprocess.run([sys.executable, str(source / "scripts" / "readme_tables.py"), *argv],
                          capture_output=True, text=True, timeout=60)


def main():
    args = parse_arguments()
    source = Path(args.source).resolve()
    result = tables(source, "--check")
    check(result.returncode == 0, f"README.md agrees with results/ ({result.stderr.strip()})")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(source / "results", work / "results")
        readme = work / "README.md"
        shutil.copy(source / "README.md", readme)
        path = work / "results" / "accuracy-fc3-5epochs.json"
        report = json.loads(path.read_text())
        old = f"| FC-3, serial | {report['metrics']['test_accuracy']:.2%}"
        report["metrics"]["test_accuracy"] = 0.4321
        path.write_text(json.dumps(report))
        result = tables(source, "--check", "--readme", str(readme), "--results", str(work / "results"))
        check(result.returncode == 1 and "'accuracy'" in result.stderr,
              f"a changed accuracy is found: exit {result.returncode}, {result.stderr.strip()!r}")
        before = readme.read_text()
        result = tables(source, "--write", "--readme", str(readme), "--results", str(work / "results"))
        after = readme.read_text()
        check(result.returncode == 0 and "43.21%" in after and old not in after,
              f"--write puts the new figure in ({result.stdout.strip()})")
        changed = [line for line in after.splitlines() if line not in before.splitlines()]
        check(len(changed) == 1 and changed[0].startswith("| FC-3, serial | 43.21%"),
              f"only that row changed: {changed}")
        result = tables(source, "--check", "--readme", str(readme), "--results", str(work / "results"))
        check(result.returncode == 0, "and then the check passes")
        # The serial-limit table too: a changed peak share is found in that part.
        path = work / "results" / "serial-limit.json"
        limit = json.loads(path.read_text())
        limit["rows"][0]["peak_fraction"] = 0.1234
        path.write_text(json.dumps(limit))
        result = tables(source, "--check", "--readme", str(readme), "--results", str(work / "results"))
        check(result.returncode == 1 and "'serial-limit'" in result.stderr and "'accuracy'" not in result.stderr,
              f"a changed peak share is found in its part: exit {result.returncode}, {result.stderr.strip()!r}")
        readme.write_text(before.replace("<!-- end of generated peers -->", ""))
        result = tables(source, "--check", "--readme", str(readme), "--results", str(work / "results"))
        check(result.returncode == 2 and "no markers for 'peers'" in result.stderr,
              f"a README without a part's markers is refused: {result.stderr.strip()!r}")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
