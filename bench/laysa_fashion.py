#!/usr/bin/python3
"""LaySA against dp on Fashion-MNIST: test accuracy and the training curve.

Usage: bench/laysa_fashion.py [--build build] [--epochs 3] [--density 0.01]
                              [--lr 0.01] [--out bench/out]
                              [--svg docs/figures/laysa-vs-dp.svg]

Trains the LeNet-style CNN (batch 8 per device) on N = 4 devices for E
epochs, SGD with momentum 0.9, same seed, under dp and under laysa at the
density (--memory-reuse layer), evaluating after each epoch; prints the
test accuracy per epoch and writes an SVG of the training loss (mean over
windows of 125 steps) and the test accuracy per epoch of both.
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
import export_torch_models as models  # noqa: E402

WINDOW = 125
COLORS = {"dp": "#1f77b4", "laysa": "#d62728"}


def train(args, path, name, flags):
    """Test accuracy after each epoch (a run of e epochs per e: the runs are
    deterministic, so its first epochs are the longer run's) and the last
    run's loss per step."""
    plan = os.path.join(args.out, name + ".cdp")
    subprocess.run([os.path.join(args.build, "bin", "cdp-compile"), path, "-o", plan,
                    "--devices", "4", "--optimizer", "momentum", "--lr", str(args.lr)] + flags,
                   check=True, stderr=subprocess.DEVNULL)
    metrics = os.path.join(args.out, name + ".jsonl")
    accuracy = []
    for epochs in range(1, args.epochs + 1):
        out = subprocess.run([os.path.join(args.build, "bin", "cdp-run"), plan, "--data",
                              "fashion-mnist", "--epochs", str(epochs), "--eval", "--seed", "1",
                              "--metrics", metrics], check=True, capture_output=True, text=True)
        accuracy.append(float(re.findall(r"test accuracy ([0-9.]+)", out.stdout)[-1]))
    losses = [json.loads(line)["loss"] for line in open(metrics) if '"loss"' in line]
    return accuracy, losses


def polyline(points, color, dashed=False):
    dash = ' stroke-dasharray="5,4"' if dashed else ""
    return '<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>' % (
        color, dash, " ".join("%.1f,%.1f" % p for p in points))


def svg(curves, epochs):
    """Two panels: the windowed training loss by step, test accuracy by epoch."""
    w, h, pad = 360, 240, 45
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
             'font-family="sans-serif" font-size="11">' % (2 * w, h + 30)]
    top = max(max(c[1]) for c in curves.values())
    steps = max(len(c[1]) for c in curves.values()) * WINDOW
    low = min(min(c[0]) for c in curves.values()) - 0.01
    high = max(max(c[0]) for c in curves.values()) + 0.01
    for panel, title in enumerate(["training loss (mean of %d steps)" % WINDOW,
                                   "test accuracy after each epoch"]):
        x0 = panel * w
        parts.append('<rect x="%d" y="10" width="%d" height="%d" fill="none" stroke="#888"/>'
                     % (x0 + pad, w - pad - 10, h - pad))
        parts.append('<text x="%d" y="%d">%s</text>' % (x0 + pad, h + 5, title))
    for name, (accuracy, windows) in curves.items():
        loss = [(pad + (i + 1) * WINDOW / steps * (w - pad - 10),
                 10 + (h - pad) * (1 - v / top)) for i, v in enumerate(windows)]
        acc = [(w + pad + (e + 1) / epochs * (w - pad - 10),
                10 + (h - pad) * (1 - (a - low) / (high - low))) for e, a in enumerate(accuracy)]
        parts.append(polyline(loss, COLORS[name]))
        parts.append(polyline(acc, COLORS[name], dashed=name == "laysa"))
        for x, y in acc:
            parts.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (x, y, COLORS[name]))
    parts.append('<text x="%d" y="24">loss 0 .. %.2f over %d steps</text>' % (pad + 5, top, steps))
    parts.append('<text x="%d" y="24">accuracy %.3f .. %.3f</text>' % (w + pad + 5, low, high))
    for i, name in enumerate(curves):
        parts.append('<text x="%d" y="%d" fill="%s">%s</text>' % (
            w - 150, 40 + 14 * i, COLORS[name], name))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--out", default=os.path.join(HERE, "out"))
    parser.add_argument("--svg", default=os.path.join(HERE, "..", "docs", "figures",
                                                      "laysa-vs-dp.svg"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = models.export("lenet", args.out)
    configs = [("dp", ["--strategy", "dp"]),
               ("laysa", ["--strategy", "laysa", "--density", str(args.density),
                          "--memory-reuse", "layer"])]
    print("LeNet-style CNN, Fashion-MNIST, N = 4 devices, B = 8, %d epochs, momentum 0.9, "
          "lr %g, laysa density %g" % (args.epochs, args.lr, args.density))
    curves = {}
    for name, flags in configs:
        accuracy, losses = train(args, path, name, flags)
        windows = [sum(losses[i:i + WINDOW]) / WINDOW
                   for i in range(0, len(losses) - WINDOW + 1, WINDOW)]
        curves[name] = (accuracy, windows)
        print("%-6s test accuracy by epoch %s; last %d steps' mean loss %.4f" % (
            name, " ".join("%.4f" % a for a in accuracy), WINDOW, windows[-1]))
    gap = 100 * (curves["laysa"][0][-1] - curves["dp"][0][-1])
    print("laysa - dp after %d epochs: %+.2f points" % (args.epochs, gap))
    with open(args.svg, "w") as f:
        f.write(svg(curves, args.epochs))


if __name__ == "__main__":
    main()
