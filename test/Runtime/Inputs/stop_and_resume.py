"""Sends SIGTERM (or SIGINT) to a cdp-run once its --metrics file shows a
few steps, then checks that it exited 0 with the stop line and left a
checkpoint; prints the line and the step it stopped at.

Usage: stop_and_resume.py SIGNAL METRICS_FILE -- CDP_RUN ARGS...
"""
import signal
import subprocess
import sys

from job_processes import wait_for_steps

sig = getattr(signal, sys.argv[1])
metrics = sys.argv[2]
command = sys.argv[sys.argv.index("--") + 1:]
proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
if not wait_for_steps(metrics, proc, 60):
    sys.exit("the run ended before the signal: raise --steps")
proc.send_signal(sig)
out, err = proc.communicate(timeout=60)
print("exit", proc.returncode)
for line in (out + err).splitlines():
    if line.startswith("cdp-run: stopped by"):
        print(line)
