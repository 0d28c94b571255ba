"""What the hostile-input generators share: running a tool under a time
limit and sorting the outcome (scripts/mutate-checkpoints.py,
scripts/mutate-schedules.py)."""
import os
import subprocess


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
