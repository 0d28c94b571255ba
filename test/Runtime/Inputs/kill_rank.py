"""Starts `mpirun -np 2 cdp-run PLAN [ARGS...]` (for many steps unless ARGS
has --steps), kills one of the cdp-run processes with SIGKILL once both
train, and reports whether the job ended non-zero and within a bound
(instead of hanging). Run in the folder holding PLAN, x.npy and y.npy;
cdp-run and mpirun on PATH.

Both train once a checkpoint is there (a checkpoint is collective): without
--checkpoint DIR in ARGS, one is taken every 10 steps into a folder of its
own. (A fixed pause before the kill was the timing dependence of
test/Runtime/mpi.test: under load a process could still be in MPI_Init a
second after it started, before it sets up the SIGTERM handler that names
the lost process, and the job then ended without that line.)"""

import os
import signal
import subprocess
import sys
import time

from job_processes import cdp_run_processes

plan, extra = sys.argv[1], sys.argv[2:]
if "--steps" not in extra:
    extra += ["--steps", "10000000"]
if "--checkpoint" not in extra:
    extra += ["--checkpoint", "kill_rank.%d.ck" % os.getpid(), "--checkpoint-every", "10"]
checkpoint = extra[extra.index("--checkpoint") + 1]
job = subprocess.Popen(
    ["mpirun", "--oversubscribe", "--mca", "btl", "self,tcp", "--mca",
     "btl_tcp_if_include", "lo", "-np", "2", "cdp-run", plan, "--feed",
     "x=x.npy", "--feed", "labels=y.npy", "--comm-timeout", "30"] + extra,
    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def ranks():
    """The job's cdp-run processes running PLAN."""
    return sorted(pid for pid, (argv, _) in cdp_run_processes(job).items()
                  if plan.encode() in argv)


deadline = time.time() + 120
while len(ranks()) < 2 and time.time() < deadline:
    time.sleep(0.1)
while (not os.path.exists(os.path.join(checkpoint, "manifest.bin"))
       and time.time() < deadline):
    time.sleep(0.01)
victims = ranks()
if not victims:
    print("no cdp-run process to kill")
    sys.exit(1)
os.kill(victims[-1], signal.SIGKILL)
killed = time.time()
try:
    _, err = job.communicate(timeout=60)
    ended = True
except subprocess.TimeoutExpired:
    os.killpg(job.pid, signal.SIGKILL)
    _, err = job.communicate()
    ended = False
# The job's messages first, then the verdict.
sys.stderr.write(err.decode(errors="replace"))
sys.stderr.flush()
print(f"ended non-zero: {ended and job.returncode != 0}, within 60 s: {ended}"
      f" ({time.time() - killed:.1f} s after the kill)")
