#!/usr/bin/env python3
"""Reports written by `cnnbench train` validate against results/schema/run-report.schema.json,
and the schema really constrains them (a report with a missing metric or a wrong type fails)."""
import argparse
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import jsonschema
except ImportError:
    print("SKIP: python3-jsonschema is not installed")
    sys.exit(77)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    schema = json.loads(Path(args.source, "results/schema/run-report.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "fc3-serial": ["--model", "fc3", "--synthetic", "256", "--steps", "3", "--eval"],
            "lenet5-blas": ["--model", "lenet5", "--synthetic", "128", "--steps", "2",
                            "--strategy", "blas", "--threads", "2"],
        }
        for name, flags in runs.items():
            out = Path(tmp, name + ".json")
            subprocess.run([args.cli, "train", *flags, "--quiet", "--report", str(out)], check=True)
            report = json.loads(out.read_text())
            errors = sorted(validator.iter_errors(report), key=lambda e: list(e.path))
            for e in errors:
                print(f"FAIL {name}: {'/'.join(map(str, e.path))}: {e.message}")
            failures += bool(errors)
            if not errors:
                print(f"ok   {name} validates")

            broken = copy.deepcopy(report)
            del broken["metrics"]["images_per_s"]
            broken["config"]["batch"] = "64"
            if validator.is_valid(broken):
                print(f"FAIL {name}: the schema accepted a report without images_per_s")
                failures += 1
    print(f"{2 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
