"""What the Python tests of the cnnbench command share: the arguments CTest passes them and the
check that prints each result and keeps the failures for the exit code. Not a test itself (CTest
runs the test_*.py files)."""
import argparse

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
