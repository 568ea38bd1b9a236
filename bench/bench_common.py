"""What the Python bench scripts share: refusing bad arguments and outputs as every cnnbench command
does (exit 2, the option named), the cnnbench they run (never a sanitizer build), and writing the
result through a temporary file and a rename, so that no half-written file is ever left."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def printable(text):
    """`text` for a terminal: control characters (escape sequences included) as \\xNN escapes."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in str(text))


def failer(name):
    """fail(message, code=1) for the script `name`: the message on stderr, then exit."""
    def fail(message, code=1):
        print(f"{name}: {printable(message)}", file=sys.stderr)
        sys.exit(code)
    return fail


def bounded(low, high):
    """An argparse type: a whole number in low..high."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{printable(text)}' is not a whole number")
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low:,}..{high:,}")
        return value
    return parse


def parser_of(doc):
    """An argument parser whose help is the script's docstring (its text, then its usage)."""
    return argparse.ArgumentParser(description=doc.split("\nUsage: ")[0],
                                   usage=doc.split("Usage: ")[1].split("\n  --")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def check_run_args(fail, out, force, cli):
    """--out may be written (not the --cli, not existing without --force, in a folder that
    exists); --cli is an executable cnnbench built without sanitizers."""
    if out.exists() and os.path.exists(cli) and os.path.samefile(out, cli):
        fail(f"--out {out}: is the --cli it runs, an input; name another file", 2)
    if out.exists() and not force:
        fail(f"--out {out}: exists; pass --force to replace it", 2)
    if not out.parent.is_dir():
        fail(f"--out {out}: no folder {out.parent}", 2)
    if not (os.path.isfile(cli) and os.access(cli, os.X_OK)):
        fail(f"--cli {cli}: not an executable (build it, or pass --cli)", 2)
    version = subprocess.run([cli, "--version"], capture_output=True, text=True).stdout
    if "sanitizers" in version:
        fail(f"--cli {cli} is a sanitizer build: its times would measure the sanitizer", 2)


def write_json(path, value):
    """`value` as JSON at `path`, through a temporary file in the same folder and a rename."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(value, f, indent=1)
            f.write("\n")
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
