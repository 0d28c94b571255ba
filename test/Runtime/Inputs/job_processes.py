"""What the scripts that signal or kill a running cdp-run share: the
cdp-run processes of an mpirun job, and waiting for a run's first steps."""

import os
import time


def cdp_run_processes(job):
    """The cdp-run processes of `job` (a Popen started with
    start_new_session: its session, read from /proc, no pgrep needed), as
    {pid: (argv, MPI rank or -1)}."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == job.pid:
            continue
        try:
            if os.getsid(int(entry)) != job.pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except (OSError, ProcessLookupError, ValueError):
            continue
        if argv and os.path.basename(argv[0]) == b"cdp-run":
            found[int(entry)] = (argv, int(environ.get(b"OMPI_COMM_WORLD_RANK", b"-1")))
    return found


def wait_for_steps(metrics, proc, seconds, lines=3):
    """Waits until the --metrics file `metrics` has `lines` lines, `proc`
    ends, or `seconds` pass; whether `proc` still runs."""
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= lines:
            break
        time.sleep(0.01)
    return proc.poll() is None
