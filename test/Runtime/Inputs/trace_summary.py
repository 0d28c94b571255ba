"""Prints a Chrome trace's content without its times: every span by
(device track, name, step, micro-batch) and every flow end by (track,
phase, id), sorted, so that two runs' traces compare with diff."""

import json
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
rows = sorted((e["tid"], e["name"], e["args"]["step"], e["args"]["micro_batch"])
              for e in events if e["ph"] == "X")
rows += sorted((e["tid"], e["ph"], e["id"]) for e in events if e["ph"] in ("s", "f"))
tracks = sorted({e["tid"] for e in events if e["ph"] == "M"})
print("tracks", tracks)
for row in rows:
    print(*row)
