"""What the hostile-input generators share: their common flags, and running
a tool under a time limit and sorting the outcome (scripts/mutate-checkpoints.py,
scripts/mutate-schedules.py)."""
import argparse
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def arguments():
    """The generators' common flags: OUT, --count, --timeout, --seed,
    --build, --jobs."""
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    return parser


def outcome(command, timeout, cwd=None):
    """Runs `command`; returns (kind, stderr) with kind "ok" (exit 0),
    "refused" (exit 1 with exactly one line, `TOOL: error: ...`), "hung"
    (the time limit) or "crashed" (anything else)."""
    try:
        result = subprocess.run(command, capture_output=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        return "hung", ""
    err = result.stderr.decode(errors="replace")
    if result.returncode == 0:
        return "ok", err
    lines = [line for line in err.splitlines() if line.strip()]
    tool = os.path.basename(command[0])
    if result.returncode == 1 and len(lines) == 1 and lines[0].startswith(tool + ": error: "):
        return "refused", err
    return "crashed", err
