"""Starts `mpirun -np 2 cdp-run ARGS...` (ARGS hold --checkpoint and
--metrics), sends SIGTERM to its cdp-run processes once the --metrics file
shows a few steps, as Slurm's srun does to a job's tasks (`all`), or to the
process of rank 1 only (`one`: the processes must still agree), and prints
the job's exit status and its stop line. Run in the folder holding the
plan and feeds; cdp-run and mpirun on PATH.

Usage: stop_mpi.py all|one METRICS_FILE -- CDP_RUN_ARGS...
"""

import os
import signal
import subprocess
import sys
import time

who, metrics = sys.argv[1], sys.argv[2]
args = sys.argv[sys.argv.index("--") + 1:]
job = subprocess.Popen(
    ["mpirun", "--oversubscribe", "--mca", "btl", "self,tcp", "--mca",
     "btl_tcp_if_include", "lo", "-np", "2", "cdp-run"] + args,
    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    start_new_session=True)


def ranks():
    """The job's cdp-run processes by MPI rank (from /proc: its session)."""
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
            found[int(environ.get(b"OMPI_COMM_WORLD_RANK", b"-1"))] = int(entry)
    return found


deadline = time.time() + 120
while time.time() < deadline and job.poll() is None:
    if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 3:
        break
    time.sleep(0.01)
if job.poll() is not None:
    sys.exit("the run ended before the signal (raise --steps): " + job.communicate()[1])
processes = ranks()
for rank in ([1] if who == "one" else sorted(processes)):
    os.kill(processes[rank], signal.SIGTERM)
try:
    out, err = job.communicate(timeout=60)
except subprocess.TimeoutExpired:
    os.killpg(job.pid, signal.SIGKILL)
    out, err = job.communicate()
    print("hung: killed after 60 s")
sys.stderr.write(err)
print("exit", job.returncode)
for line in out.splitlines():
    if line.startswith("cdp-run: stopped by"):
        print(line)
