"""Sends SIGTERM (or SIGINT) to a cdp-run once its --metrics file shows a
few steps, then checks that it exited 0 with the stop line and left a
checkpoint; prints the line and the step it stopped at.

Usage: stop_and_resume.py SIGNAL METRICS_FILE -- CDP_RUN ARGS...
"""
import os
import signal
import subprocess
import sys
import time

sig = getattr(signal, sys.argv[1])
metrics = sys.argv[2]
command = sys.argv[sys.argv.index("--") + 1:]
proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
deadline = time.time() + 60
while time.time() < deadline and proc.poll() is None:
    if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 3:
        break
    time.sleep(0.01)
if proc.poll() is not None:
    sys.exit("the run ended before the signal: raise --steps")
proc.send_signal(sig)
out, err = proc.communicate(timeout=60)
print("exit", proc.returncode)
for line in (out + err).splitlines():
    if line.startswith("cdp-run: stopped by"):
        print(line)
