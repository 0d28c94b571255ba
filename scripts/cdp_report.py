"""Reads a cdp report (cdp-compile --report, cdp-run --report) with every
device's row spelled out in each time step.

Schema cdp-report/2 writes devices that are alike in every number once: a
time step's `devices` then holds one row per distinct series, and
`series_of[d]` names device d's row. `load` and `expand` undo that, so a
reader indexes `time_steps[t]["devices"][d]` for every device d (schema 1
reports, which spell every device, read unchanged).

Usage: import cdp_report; report = cdp_report.load("report.json")
"""
import json


def expand(report):
    """`report` (a parsed JSON object) with a row per device in each time
    step and without `series_of`; each row its own dict."""
    rows_of = report.pop("series_of", None)
    if rows_of is not None:
        for step in report["time_steps"]:
            rows = step["devices"]
            step["devices"] = [dict(rows[row]) for row in rows_of]
    return report


def load(path):
    """The report at `path`, expanded."""
    with open(path) as f:
        return expand(json.load(f))
