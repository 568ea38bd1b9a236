"""What the Python tests of the cnnbench command share: the arguments CTest passes them and the
check that prints each result and keeps the failures for the exit code. Not a test itself (CTest
runs the test_*.py files)."""
import argparse
import json
import sys
from pathlib import Path

FAILURES = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        FAILURES.append(message)


def parse_arguments():
    """--cli: the cnnbench binary under test; --source: the source tree (results/, plots/)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--source", required=True)
    return parser.parse_args()


def exit_code():
    """1 (after saying how many) when a check failed, else 0: what main returns."""
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    return 0


def schema_validator(source, name):
    """A validator of results/schema/NAME.schema.json (itself checked against its draft). Without
    python3-jsonschema the test reports itself skipped (exit 77)."""
    try:
        import jsonschema
    except ImportError:
        print("SKIP: python3-jsonschema is not installed")
        sys.exit(77)
    schema = json.loads(Path(source, "results/schema", f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)
