#!/usr/bin/python3
"""Edits schedule CSV files at random and compiles (and runs) each.

`cdp-compile --schedule FILE` reads a pipeline's step from a table the user
may have written by hand. This script writes each pipeline strategy's own
table (`--emit=schedule-csv`), then COUNT copies with one to three random
edits each: cells dropped, duplicated, swapped or moved to another time
step or device; tokens' stage, micro-batch or kind changed (to nearby,
negative or huge values, or garbage); rows dropped, duplicated or added;
columns added or removed; the header changed; bytes inserted (NUL, CR,
quotes, a byte-order mark, invalid UTF-8). Each copy is compiled under a
time limit; a plan it yields is run for two steps under a time limit.
Every compile must succeed or be refused in one line
(`cdp-compile: error: ...`, exit 1), and every run of an accepted schedule
must complete or be refused in one line; anything else (a signal, another
exit code, several lines, the time limit) is a finding, kept under
OUT/findings with its edits and output.

Usage: scripts/mutate-schedules.py OUT [--count N] [--timeout S]
                                   [--seed S] [--build DIR] [--jobs J]
"""
import concurrent.futures
import os
import random
import re
import shutil
import subprocess
import sys

import hostile_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATEGIES = {
    "gpipe": [],
    "1f1b": [],
    "2bw": [],
    "interleaved-1f1b": [],
    "zb-h1": [],
}
COMMON = ["--micro-batches", "4", "--stage-boundaries", "tanh0,tanh1,tanh2"]
TOKEN = re.compile(r"^(\d+)([A-Z_]+)(\d+)$")
GARBAGE = ["", "x", "0", "-1F0", "9999999999999999999F0", "0F", "F0", "0Q0", "0F-1",
           "0F99999999999", "\"0F0\"", "0F0,", "0 F0", "\x00", "\xef\xbb\xbf0F0", "\xff\xfe",
           "0RECV_F0", "0SEND_B99", "3W0", "0I0", "0B0"]


def run(command, timeout):
    return hostile_runs.outcome(command, timeout)


def edit_token(rng, token):
    match = TOKEN.match(token)
    if not match or rng.random() < 0.2:
        return rng.choice(GARBAGE)
    stage, kind, batch = match.groups()
    which = rng.randrange(3)
    change = rng.choice([-1, 1, 2, 7, 1000, 2**31, 2**63, -2**31])
    if which == 0:
        stage = str(int(stage) + change)
    elif which == 1:
        kind = rng.choice(["F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "X"])
    else:
        batch = str(int(batch) + change)
    return stage + kind + batch


def edit(rng, rows, note):
    """One edit of the table: rows[0] is the comment, rows[1] the header."""
    body = rows[2:]
    kind = rng.randrange(10)
    if kind == 0 and body:
        at = rng.randrange(len(body))
        note.append("drop row %d" % at)
        del rows[2 + at]
    elif kind == 1 and body:
        at = rng.randrange(len(body))
        note.append("duplicate row %d" % at)
        rows.insert(2 + at, list(body[at]))
    elif kind == 2:
        note.append("add a column")
        for row in rows[1:]:
            row.append(rng.choice(["", "0F0", "device 9"]))
    elif kind == 3 and len(rows[1]) > 2:
        note.append("remove the last column")
        for row in rows[1:]:
            if len(row) > 1:
                del row[-1]
    elif kind == 4:
        note.append("edit the header or comment")
        target = rng.choice([0, 1])
        rows[target] = [rng.choice(["# cdp schedule: stages=99 micro-batches=4",
                                    "# cdp schedule: stages=-1", "time,device 0", "",
                                    "# nothing", "time,device 0,device 0,device 1,device 2"])]
    elif kind == 5:
        note.append("insert odd bytes")
        at = rng.randrange(len(rows))
        rows[at][rng.randrange(len(rows[at]))] += rng.choice(["\x00", "\r", "\"", "\xef\xbb\xbf",
                                                               "\xc3", "\n", ",,"])
    else:
        cells = [(r, c) for r in range(2, len(rows)) for c in range(1, len(rows[r])) if rows[r][c]]
        if not cells:
            return
        r, c = rng.choice(cells)
        tokens = rows[r][c].split(" ")
        t = rng.randrange(len(tokens))
        if kind == 6:
            note.append("drop token %s at %d,%d" % (tokens[t], r, c))
            del tokens[t]
        elif kind == 7:
            r2, c2 = rng.choice(cells)
            note.append("move token %s from %d,%d to %d,%d" % (tokens[t], r, c, r2, c2))
            rows[r2][c2] += " " + tokens[t]
            del tokens[t]
        elif kind == 8:
            note.append("duplicate token %s at %d,%d" % (tokens[t], r, c))
            tokens.insert(t, tokens[t])
        else:
            new = edit_token(rng, tokens[t])
            note.append("token %s -> %r at %d,%d" % (tokens[t], new, r, c))
            tokens[t] = new
        rows[r][c] = " ".join(tokens)


def main():
    parser = hostile_runs.arguments()
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    bin_dir = os.path.join(args.build, "bin")
    model = os.path.join(args.out, "model.onnx")
    subprocess.run([sys.executable, os.path.join(ROOT, "test", "Import", "make_models.py"),
                    "mlp4eq", model], check=True, capture_output=True)
    import numpy as np
    rng_np = np.random.default_rng(0)
    np.save(os.path.join(args.out, "x.npy"), rng_np.standard_normal((64, 16)).astype(np.float32))
    np.save(os.path.join(args.out, "y.npy"), rng_np.integers(0, 16, 64))
    feeds = ["--feed", "x=" + os.path.join(args.out, "x.npy"),
             "--feed", "labels=" + os.path.join(args.out, "y.npy")]
    tables = {}
    for strategy in STRATEGIES:
        csv = os.path.join(args.out, strategy + ".csv")
        subprocess.run([os.path.join(bin_dir, "cdp-compile"), model, "--strategy", strategy,
                        "--emit=schedule-csv", "-o", csv] + COMMON, check=True,
                       capture_output=True)
        tables[strategy] = [line.split(",") for line in open(csv).read().splitlines()]
    rng = random.Random(args.seed)
    work = []
    for index in range(args.count):
        strategy = list(STRATEGIES)[index % len(STRATEGIES)]
        rows = [list(row) for row in tables[strategy]]
        note = []
        for _ in range(rng.randint(1, 3)):
            edit(rng, rows, note)
        path = os.path.join(args.out, "mutants", "%04d-%s.csv" % (index, strategy))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write("\n".join(",".join(row) for row in rows) + "\n")
        work.append((strategy, path, note))

    def attempt(item):
        strategy, path, _ = item
        plan = path[:-4] + ".cdp"
        outcome, err = run([os.path.join(bin_dir, "cdp-compile"), model, "--strategy", strategy,
                            "--schedule", path, "-o", plan] + COMMON, args.timeout)
        if outcome != "ok":
            return "compile " + outcome, err
        outcome, err = run([os.path.join(bin_dir, "cdp-run"), plan, "--steps", "2"] + feeds,
                           args.timeout)
        return "accepted, run " + outcome, err

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(attempt, work))
    counts = {}
    findings = 0
    for (strategy, path, note), (outcome, err) in zip(work, outcomes):
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome.endswith("crashed") or outcome.endswith("hung"):
            findings += 1
            folder = os.path.join(args.out, "findings")
            os.makedirs(folder, exist_ok=True)
            shutil.copy(path, folder)
            with open(os.path.join(folder, os.path.basename(path) + ".txt"), "w") as f:
                f.write("%s\n%s\nedits: %s\n%s" % (outcome, strategy, "; ".join(note), err))
            print("finding (%s): %s: %s" % (outcome, path, "; ".join(note)), file=sys.stderr)
    refused = counts.get("compile refused", 0)
    ran = counts.get("accepted, run ok", 0)
    run_refused = counts.get("accepted, run refused", 0)
    print("mutate-schedules: %d edited schedules of %d strategies: %d refused in one line, "
          "%d compiled and ran, %d compiled and were refused by cdp-run in one line, "
          "%d findings" % (args.count, len(STRATEGIES), refused, ran, run_refused, findings))


if __name__ == "__main__":
    main()
