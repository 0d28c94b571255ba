#!/usr/bin/python3
"""Edits a compiled plan on purpose and seals it again (a valid checksum).

Usage: reseal_plan.py WORK_DIR PLAN OUT EDIT

EDIT is `optimizer=NAME` (every instruction's optimizer attribute becomes
NAME), `no-instructions` (every device's stream emptied) or
`widen-outputs` (every output marked as stored in 2 bytes). The checksum
catches accidents, not edits: what the runtime must refuse of such a plan
is what these make.
"""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location(
    "mutate_plans", os.path.join(ROOT, "scripts", "mutate-plans.py"))
mutate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mutate)


def main():
    work, source, target, edit = sys.argv[1:5]
    schema = mutate.load_schema(work)
    header, plan = mutate.read_plan(schema, source)
    for _, stream, i in mutate.all_instructions(plan):
        for attribute in stream[i].attributes:
            if edit.startswith("optimizer=") and attribute.name == "optimizer":
                attribute.s = edit.split("=", 1)[1]
    if edit == "no-instructions":
        for device in plan.devices:
            del device.instructions[:]
            del device.runs[:]
        del plan.templates[:]
    if edit == "widen-outputs":
        for output in plan.outputs:
            output.widened = True
    with open(target, "wb") as f:
        f.write(mutate.seal(header, plan))


if __name__ == "__main__":
    main()
