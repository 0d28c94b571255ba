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

from job_processes import cdp_run_processes, wait_for_steps

who, metrics = sys.argv[1], sys.argv[2]
args = sys.argv[sys.argv.index("--") + 1:]
job = subprocess.Popen(
    ["mpirun", "--oversubscribe", "--mca", "btl", "self,tcp", "--mca",
     "btl_tcp_if_include", "lo", "-np", "2", "cdp-run"] + args,
    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    start_new_session=True)
if not wait_for_steps(metrics, job, 120):
    sys.exit("the run ended before the signal (raise --steps): " + job.communicate()[1])
processes = {rank: pid for pid, (_, rank) in cdp_run_processes(job).items()}
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
