#!/usr/bin/python3
"""Writes hand-broken copies of a 1f1b schedule CSV for 2 stages and 2
micro-batches (cdp-compile --emit=schedule-csv), one fault each, named
after the fault: OUT_DIR/<name>.csv.

Usage: break_schedule.py GOOD.csv OUT_DIR
"""
import os
import sys

# (name, text to replace, replacement): each makes exactly one fault.
BREAKS = [
    # Stage 1's B of micro-batch 0 before its F.
    ("b-before-f", "1,0F1 0SEND_F1,1RECV_F0 1F0\n2,,1B0 1SEND_B0",
     "1,0F1 0SEND_F1,1B0 1SEND_B0\n2,,1RECV_F0 1F0"),
    # A send nobody receives: device 1 reads micro-batch 0's forward output
    # without receiving it.
    ("unmatched-send", "1,0F1 0SEND_F1,1RECV_F0 1F0", "1,0F1 0SEND_F1,1F0"),
    # A send that has no receiver (stage 0 has no previous stage).
    ("send-nowhere", "0,0F0 0SEND_F0,", "0,0F0 0SEND_F0 0SEND_B0,"),
    # A receive of a forward output that is never sent.
    ("unmatched-recv", "0,0F0 0SEND_F0,", "0,0F0,"),
    # Device 0 waits for micro-batch 0's gradient before sending micro-batch
    # 1's forward output, which device 1 waits for first.
    ("deadlock", "1,0F1 0SEND_F1,1RECV_F0 1F0\n2,,1B0 1SEND_B0\n3,0RECV_B0 0B0,1RECV_F1 1F1",
     "1,0F1 0RECV_B0 0SEND_F1,1RECV_F0 1F0\n2,,1RECV_F1 1B0 1SEND_B0\n3,0B0,1F1"),
    ("unknown-stage", "4,,1B1 1SEND_B1", "4,,1B1 1SEND_B1 5F0"),
    ("bad-syntax", "4,,1B1 1SEND_B1", "4,,1B1 1SEND_B1 forward"),
    # The same forward twice.
    ("duplicate", "6,0U,", "6,0F1 0U,"),
    # A stage on two devices.
    ("two-devices", "6,0U,", "6,,0U"),
    # The update before the stage's last backward.
    ("update-early", "5,0RECV_B1 0B1,1U\n6,0U,", "5,0U 0RECV_B1 0B1,1U\n6,,"),
    # A missing backward.
    ("missing-backward", "4,,1B1 1SEND_B1", "4,,"),
    # Time steps out of order.
    ("row-number", "4,,1B1", "7,,1B1"),
    # Two computations at one time step.
    ("two-at-once", "2,,1B0 1SEND_B0\n3,0RECV_B0 0B0,1RECV_F1 1F1",
     "2,,1B0 1SEND_B0 1RECV_F1 1F1\n3,0RECV_B0 0B0,"),
]


def main():
    good, out = sys.argv[1:3]
    text = open(good).read()
    os.makedirs(out, exist_ok=True)
    for name, old, new in BREAKS:
        if old not in text:
            sys.exit("break_schedule.py: %s: the schedule has no '%s'" % (name, old))
        with open(os.path.join(out, name + ".csv"), "w") as f:
            f.write(text.replace(old, new, 1))


if __name__ == "__main__":
    main()
