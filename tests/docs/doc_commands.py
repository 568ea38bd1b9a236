#!/usr/bin/env python3
"""The docs are tested like code: every command README.md and docs/*.md show a user is found,
and each one either runs here or says why not.

What counts as a command:
- a code block (fenced ```sh/```bash, or fenced or indented with no language) whose first line
  that is not a comment starts with a command (cnnbench, $cli, a path under scripts/, bench/,
  datasets/ or build/, mpirun, srun, sbatch, salloc, cmake, ctest, env, ...);
- an inline `code span` that starts with `cnnbench `, `$cli `, or a script path.

What happens to it:
- a code block runs, as one bash script with `set -euo pipefail`, in a sandbox (below), scaled
  down where it would be long: the generic rules of scale() and the block's own markers;
- a code block may instead carry a marker that says why it does not run here (needs a GPU, a
  Slurm cluster, root, a whole release build), or that it is a synopsis (placeholders such as N,
  DIR, [--flag]) or the program's output;
- every command, run or not, and every inline one, has its cnnbench subcommand and each --flag
  checked against `cnnbench SUBCOMMAND --help`, and each script it names must exist and list the
  flags it is given in its own --help. A renamed flag fails here, run or not.

Markers are HTML comments (invisible in the rendered page) on the lines just before a block:
  <!-- doc-test skip REASON -->           the block does not run here, for REASON
  <!-- doc-test synopsis -->              placeholders: only the flags are checked
  <!-- doc-test output -->                what a program prints, not a command
  <!-- doc-test replace 'OLD' 'NEW' -->   scaling: OLD becomes NEW before the block runs
  <!-- doc-test skip-line 'TEXT' REASON --> lines holding TEXT do not run, for REASON
  <!-- doc-test expect 'TEXT' -->         the block's output must contain TEXT
  <!-- doc-test tolerate 'LINE' 'TEXT' REASON --> a line holding LINE may exit non-zero when its
                                          output holds TEXT, for REASON (a state of the machine
                                          the command reports by its exit code)

The sandbox, one for each block: a fresh folder holding links to scripts/, bench/, datasets/, docs/ and tests/ of the
checkout, copies of results/ and plots/ (commands write there with --force), build/release and
build/ci pointing at the build under test, `cnnbench` on PATH, and a cache folder of its own; no
command writes into the checkout. A command needing a program this machine lacks (man, dot,
iperf3) is skipped with that reason.

Usage: doc_commands.py --cli BUILD/apps/cnnbench --source CHECKOUT [--list] [--only FILE]
Exit 0: every block that runs here passed and every flag is known; 1 otherwise."""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMAND_START = re.compile(
    r"^(\$cli\b|cnnbench\s|\.?/?(scripts|bench|datasets|build|tests)/|mpirun\b|srun\b|sbatch\b|"
    r"salloc\b|cmake\b|ctest\b|env\b|source\b|for\b|/tmp/|ip netns\b|cli=|resume=)")
INLINE_START = re.compile(r"^(cnnbench\s+[a-z]|\$cli\s|\.?/?(scripts|bench|datasets)/\S+\.sh\b)")
SCRIPT_PATH = re.compile(r"(?:^|[\s;&|(])\.?/?((?:scripts|bench|datasets)/[\w.-]+\.sh)\b")
FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
TIMEOUT_S = 600


class Block:
    def __init__(self, file, line, text, kind):
        self.file, self.line, self.text, self.kind = file, line, text, kind
        self.markers = []

    @property
    def where(self):
        return f"{self.file}:{self.line}"

    def commands(self):
        """The logical command lines (continuations joined), comments and blanks left out."""
        joined = re.sub(r"\\\n\s*", " ", self.text)
        return [line.strip() for line in joined.splitlines()
                if line.strip() and not line.strip().startswith("#")]


MARKER_FORMS = {
    "skip": re.compile(r"^(.+)$", re.S),
    "synopsis": re.compile(r"^$"),
    "output": re.compile(r"^$"),
    "replace": re.compile(r"^'([^']*)'\s+'([^']*)'$"),
    "skip-line": re.compile(r"^'([^']*)'\s+(.+)$", re.S),
    "expect": re.compile(r"^'([^']*)'$"),
    "timeout": re.compile(r"^(\d+)$"),
    "tolerate": re.compile(r"^'([^']*)'\s+'([^']*)'\s+(.+)$", re.S),
}


def markers_of(comment, where):
    """[(name, [arguments])] of one doc-test comment; a malformed one stops the test."""
    name, _, rest = comment.strip().partition(" ")
    form = MARKER_FORMS.get(name)
    match = form.match(rest.strip()) if form else None
    if match is None:
        raise SystemExit(f"FAIL {where}: a doc-test marker this test does not read: '{comment}' "
                         f"(forms: {', '.join(MARKER_FORMS)}; quote text with single quotes)")
    return [(name, list(match.groups()))]


def code_blocks(path, name):
    """The code blocks of a Markdown file, each with the doc-test markers just before it."""
    lines = path.read_text().split("\n")
    blocks, pending = [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = re.match(r"\s*<!--\s*doc-test\s+(.*?)\s*-->\s*$", line)
        if marker:
            pending += markers_of(marker.group(1), f"{name}:{i + 1}")
            i += 1
            continue
        fence = re.match(r"^\s*```(\w*)\s*$", line)
        if fence:
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            block = Block(name, i + 1, "\n".join(lines[i + 1:j]), fence.group(1))
            block.markers, pending = pending, []
            blocks.append(block)
            i = j + 1
            continue
        if line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            text = "\n".join(l[4:] for l in lines[i:j]).rstrip()
            block = Block(name, i + 1, text, "indented")
            block.markers, pending = pending, []
            blocks.append(block)
            i = j
            continue
        if line.strip():
            pending = []  # a marker belongs to the block right after it
        i += 1
    return blocks


def is_command_block(block):
    if block.kind in ("mermaid", "json", "text", "cpp", "python", "cmake", "roff"):
        return False
    if block.kind in ("sh", "bash"):
        return True
    first = next((c for c in block.commands()), "")
    return bool(COMMAND_START.match(first)) and not first.startswith("cnnbench:")


def inline_commands(path, name):
    text = path.read_text()
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("    "):
            continue
        for span in re.findall(r"`([^`\n]+)`", line):
            if INLINE_START.match(span):
                found.append((f"{name}:{number}", span))
    return found


class Help:
    """What `cnnbench SUBCOMMAND --help` and each script's --help list, asked once each."""

    def __init__(self, cli, source):
        self.cli, self.source, self.cache = cli, source, {}
        root = self.ask([cli, "--help"])
        self.subcommands = set(re.findall(r"^  ([a-z][a-z-]+)\s", root.split("Subcommands:")[-1], re.M))
        self.root_flags = set(FLAG.findall(root.split("Subcommands:")[0]))

    def ask(self, argv):
        key = tuple(argv)
        if key not in self.cache:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                    env=dict(os.environ, COLUMNS="200"))
            self.cache[key] = result.stdout + result.stderr
        return self.cache[key]

    def flags_of(self, subcommand):
        return set(FLAG.findall(self.ask([self.cli, subcommand, "--help"])))

    def script_flags(self, script):
        return set(FLAG.findall(self.ask([str(self.source / script), "--help"])))


def cnnbench_calls(command):
    """(subcommand or None, [flags]) for each cnnbench call in a command line."""
    calls = []
    for part in re.split(r"\|\||&&|[|;&]|\$\(|<\(", command):
        words = part.split()
        for k, word in enumerate(words):
            program = word in ("$cli", "cnnbench", "${cli}", '"$cli"') or (
                word.endswith("apps/cnnbench") and "=" not in word)
            if program and not (k > 0 and words[k - 1] == "--cli"):  # --cli PATH is an argument
                rest = words[k + 1:]
                sub = rest[0] if rest and re.match(r"^[a-z][a-z-]*$", rest[0]) else None
                flags = [f for w in rest for f in FLAG.findall(w.split("=")[0]) if w.startswith("-")]
                calls.append((sub, flags))
                break
    return calls


def check_flags(help_, where, command, problems):
    """Problems with the cnnbench subcommands, scripts and flags a command names."""
    checked = 0
    for sub, flags in cnnbench_calls(command):
        if sub is None:
            known = help_.root_flags
        elif sub not in help_.subcommands:
            problems.append(f"{where}: `{command}`: cnnbench has no subcommand '{sub}'")
            continue
        else:
            known = help_.flags_of(sub)
        for flag in flags:
            checked += 1
            if flag not in known:
                problems.append(f"{where}: `{command}`: cnnbench {sub or ''} has no option {flag}")
    for script in SCRIPT_PATH.findall(command):
        path = help_.source / script
        if not path.is_file():
            problems.append(f"{where}: `{command}`: no script {script}")
            continue
        after = command.split(script, 1)[1]
        after = re.split(r"\|\||&&|[|;&]", after)[0]
        known = help_.script_flags(script)
        for flag in FLAG.findall(after):
            if any(w.startswith(flag) for w in after.split()):
                checked += 1
                if flag not in known:
                    problems.append(f"{where}: `{command}`: {script} --help lists no {flag}")
    return checked


def scale(command):
    """The generic scaling of a command that trains: at most a few seconds each, same shape."""
    out, scaled = command, False

    def sub(pattern, repl):
        nonlocal out, scaled
        new = re.sub(pattern, repl, out, count=1)
        scaled |= new != out
        out = new

    if re.search(r"(cnnbench|\$cli)\s+train\b", out):
        sub(r"--steps (\d+)", lambda m: f"--steps {max(2, int(m.group(1)) // 20)}")
        sub(r"--epochs (\d+)", "--epochs 1")
        sub(r"--checkpoint-every (\d+)", lambda m: f"--checkpoint-every {max(1, int(m.group(1)) // 20)}")
    if re.search(r"(cnnbench|\$cli)\s+sweep\b", out):
        sub(r"--repeat \d+", "--repeat 1")
        sub(r"--steps \d+", "--steps 2")
        sub(r"--tta-max-steps \d+", "--tta-max-steps 20")
        call = r"((?:cnnbench|\$cli)\s+sweep)\b"
        if "--steps" not in out and "--epochs" not in out:
            sub(call, r"\1 --steps 2")
        if "--warmup" not in out:
            sub(call, r"\1 --warmup 0")
        if "--target-accuracy" in out and "--tta-max-steps" not in out:
            sub(call, r"\1 --tta-max-steps 20 --eval-every 10")
        # The default grid is 1..nproc cores and 1..min(4, nproc) nodes: two of each here.
        if "--cores" not in out:
            sub(call, r"\1 --cores 1,2")
        if "--nodes" not in out:
            sub(call, r"\1 --nodes 1,2")
    if re.search(r"(cnnbench|\$cli)\s+tune\b", out):
        sub(r"--budget \d+", "--budget 20")
        sub(r"--repeat \d+", "--repeat 1")
        call = r"((?:cnnbench|\$cli)\s+tune)\b"
        if "--repeat" not in out:
            sub(call, r"\1 --repeat 1")
        sub(call, r"\1 --warmup 0 --min-time 0.02")
    if re.search(r"bench/\w+\.sh", out):
        sub(r"--pairs \d+", "--pairs 1")
    return out, scaled


def sandbox(folder, cli, source):
    for name in ("scripts", "bench", "datasets", "docs", "tests", "fuzz"):
        if (source / name).exists():
            (folder / name).symlink_to(source / name)
    for name in ("results", "plots"):
        shutil.copytree(source / name, folder / name, symlinks=True)
    build = Path(cli).resolve().parent.parent
    (folder / "build").mkdir()
    for name in ("release", "ci"):
        (folder / "build" / name).symlink_to(build)
    (folder / "bin").mkdir()
    (folder / "bin" / "cnnbench").symlink_to(Path(cli).resolve())
    (folder / "cache").mkdir()
    env = dict(os.environ, PATH=f"{folder / 'bin'}:{os.environ.get('PATH', '')}",
               XDG_CACHE_HOME=str(folder / "cache"), MANPAGER="cat", PAGER="cat", COLUMNS="100")
    env.pop("CNNBENCH_ISA", None)
    if os.geteuid() == 0:  # Open MPI refuses root unless told it is meant
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


BUILTINS = {"source", ".", "for", "do", "done", "if", "then", "fi", "set", "cd", "export", "true",
            "env", "timeout", "[[", "echo"}


def program_words(command):
    """The first word of each simple command in a line: after a pipe, ;, && or ||, and
    inside $( ) or <( ); comments left out."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.commenters = "#"
    lexer.wordchars += "$/.-=~:,[]{}@%+"
    words, at_start = [], True
    try:
        for token in lexer:
            if token and set(token) <= set("|;&()<>"):
                at_start = token not in (">", "<", ">>", "<<")
                continue
            if at_start:
                words.append(token)
            at_start = False
    except ValueError:  # an unbalanced quote: nothing to say about its programs
        pass
    return words


def missing_programs(commands, folder):
    missing = set()
    for command in commands:
        for word in program_words(command):
            if "=" in word or word in BUILTINS or word.startswith("$") or "/" in word:
                continue
            if shutil.which(word) is None and not (folder / "bin" / word).exists():
                missing.add(word)
    return sorted(missing)


def run_block(block, assignments, env, folder, stats, problems):
    commands = block.commands()
    skip_lines = [(args[0], args[1]) for name, args in block.markers if name == "skip-line"]
    script_lines = []
    for command in commands:
        held = next((reason for text, reason in skip_lines if text in command), None)
        if held is not None:
            stats["skipped"] += 1
            stats["reasons"].append(f"{block.where}: `{command[:70]}`: {held}")
            continue
        script_lines.append(command)
    if not script_lines:
        return
    body = "\n".join(script_lines)
    for name, args in block.markers:
        if name == "replace":
            if args[0] not in body:
                problems.append(f"{block.where}: replace marker: '{args[0]}' is not in the block")
            body = body.replace(args[0], args[1])
            stats["scaled_markers"] += 1
    scaled_lines = []
    for line in body.split("\n"):
        line, scaled = scale(line)
        stats["scaled"] += scaled
        scaled_lines.append(line)
    runnable = []
    for line in scaled_lines:
        absent = missing_programs([line], folder)
        if absent:
            stats["skipped"] += 1
            stats["reasons"].append(f"{block.where}: `{line[:70]}`: needs {', '.join(absent)}, "
                                    f"not installed here")
        else:
            runnable.append(line)
    if not runnable:
        return
    tolerated = [(args[0], args[1]) for name, args in block.markers if name == "tolerate"]
    for i, line in enumerate(runnable):
        said = next((text for holding, text in tolerated if holding in line), None)
        if said is not None:
            # Its exit status and output kept: a non-zero exit passes only when the output says TEXT.
            # On lines of their own: the line may end in a comment.
            runnable[i] = (f"doc_out=$(mktemp)\n{{\n{line}\n}} >\"$doc_out\" 2>&1 && doc_status=0 || doc_status=$?\n"
                           f"cat \"$doc_out\"\nif ((doc_status != 0)); then grep -qF -- {shlex.quote(said)} "
                           f"\"$doc_out\" || exit $doc_status; echo \"doc-test: tolerated exit $doc_status\"; fi\n"
                           f"rm -f \"$doc_out\"")
    scaled_lines = runnable
    script_lines = runnable
    script = "set -euo pipefail\n" + "\n".join(assignments) + "\n" + \
        "trap 'echo \"doc-test: this command failed: $BASH_COMMAND\" >&2' ERR\n" + "\n".join(scaled_lines) + "\n"
    timeout = next((int(args[0]) for name, args in block.markers if name == "timeout"), TIMEOUT_S)
    start = time.monotonic()
    try:
        result = subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True,
                                text=True, errors="replace", timeout=timeout)
        code, output = result.returncode, result.stdout + result.stderr
    except subprocess.TimeoutExpired as e:
        code = f"timeout after {timeout} s"
        output = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    seconds = time.monotonic() - start
    stats["run"] += len(script_lines)
    if code != 0:
        tail = "\n".join("    " + l for l in output.strip().splitlines()[-12:])
        problems.append(f"{block.where}: exit {code} after {seconds:.0f} s:\n{tail}")
        print(f"FAIL {block.where}: {len(script_lines)} command(s), exit {code} ({seconds:.0f} s)")
        return
    for name, args in block.markers:
        if name == "expect" and args[0] not in output:
            problems.append(f"{block.where}: the output no longer says '{args[0]}'")
    print(f"ok   {block.where}: {len(script_lines)} command(s) ({seconds:.0f} s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cli", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--list", action="store_true", help="list what would run, run nothing")
    parser.add_argument("--only", help="one Markdown file (relative to the checkout)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress as it goes, also into a log file
    source = Path(args.source).resolve()
    files = [source / "README.md"] + sorted((source / "docs").glob("*.md"))
    if args.only:
        files = [source / args.only]
    help_ = Help(args.cli, source)
    problems = []
    stats = {"run": 0, "scaled": 0, "scaled_markers": 0, "skipped": 0, "synopsis": 0, "output": 0,
             "inline": 0, "flags": 0, "reasons": []}
    with tempfile.TemporaryDirectory(prefix="cnnbench-docs-") as tmp:
        for path in files:
            name = str(path.relative_to(source))
            assignments = []
            for block in code_blocks(path, name):
                kinds = {marker for marker, _ in block.markers}
                if "output" in kinds:
                    stats["output"] += 1
                    continue
                if not is_command_block(block):
                    continue
                commands = block.commands()
                for command in commands:
                    stats["flags"] += check_flags(help_, block.where, command, problems)
                if "synopsis" in kinds:
                    stats["synopsis"] += len(commands)
                    continue
                skip = next((args for marker, args in block.markers if marker == "skip"), None)
                if skip is not None:
                    stats["skipped"] += len(commands)
                    stats["reasons"].append(f"{block.where}: {skip[0]}")
                elif args.list:
                    print(f"{block.where}: would run {len(commands)} command(s)")
                else:
                    # Each block in a sandbox of its own: the docs' examples are read one by one,
                    # and one's outputs must not stand in the way of another's.
                    folder = Path(tempfile.mkdtemp(dir=tmp))
                    env = sandbox(folder, args.cli, source)
                    run_block(block, assignments, env, folder, stats, problems)
                    shutil.rmtree(folder, ignore_errors=True)
                assignments += [c for c in commands if re.match(r"^\w+=\S+$", c)]
            for where, span in inline_commands(path, name):
                stats["inline"] += 1
                stats["flags"] += check_flags(help_, where, span, problems)
    for reason in stats["reasons"]:
        print(f"skip {reason}")
    print(f"doc commands: {stats['run']} run ({stats['scaled']} scaled by the generic rules, "
          f"{stats['scaled_markers']} replace markers), {stats['skipped']} skipped with a reason, "
          f"{stats['synopsis']} synopsis lines, {stats['output']} output blocks, "
          f"{stats['inline']} inline commands; {stats['flags']} flags checked against --help")
    for problem in problems:
        print(f"FAIL {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
