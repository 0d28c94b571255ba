#!/usr/bin/python3
"""Starts mpirun jobs whose processes were given different runs.

mpirun's MPMD form (`mpirun -np 1 A : -np 1 B`) gives each process its own
command line; a job whose processes disagree must stop in one line before
the first step, not wait out --comm-timeout or train on a mixture. This
script compiles a small model for dp on 2 devices and starts COUNT jobs of
two processes, each with one or two random differences for process 1:
another --steps, --seed, --epochs-like step count, learning-rate plan,
strategy plan, feed file contents (the same name in another folder), feed
order, an extra flag, a --checkpoint-every; and, as controls, jobs whose
processes differ only in --threads or --comm-timeout, which must train.
Every disagreeing job must end non-zero with exactly one
`cdp-run: error: mpirun's process 1 ...` line and no training output;
every control must exit 0. Anything else is a finding, printed with its
command lines.

Usage: scripts/mismatch-ranks.py OUT [--count N] [--timeout S] [--seed S]
                                 [--build DIR]
"""
import argparse
import os
import random
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = ["mpirun", "--oversubscribe", "--mca", "btl", "self,tcp", "--mca",
          "btl_tcp_if_include", "lo"]
if os.geteuid() == 0:
    MPIRUN.insert(1, "--allow-run-as-root")


def base(out):
    return ["dp.cdp", "--feed", "x=x.npy", "--feed", "labels=y.npy", "--steps", "2",
            "--comm-timeout", "30"]


def differ(rng, args, note):
    """One difference for process 1 (changes `args` and may need --wdir)."""
    kind = rng.randrange(8)
    if kind == 0:
        args[args.index("--steps") + 1] = rng.choice(["1", "3", "20"])
        note.append("--steps")
    elif kind == 1:
        args += ["--seed", str(rng.randrange(1, 100))]
        note.append("--seed")
    elif kind == 2:
        args[0] = rng.choice(["dp-lr.cdp", "dp-adam.cdp"])
        note.append("plan " + args[0])
    elif kind == 3:
        note.append("feed contents")
        return "other"
    elif kind == 4:
        i = args.index("--feed")
        args[i:i + 4] = args[i + 2:i + 4] + args[i:i + 2]
        note.append("feed order")
    elif kind == 5:
        args += ["--allow-nonfinite"]
        note.append("--allow-nonfinite")
    elif kind == 6:
        args += ["--checkpoint-every", "1", "--checkpoint", "ck1"]
        note.append("--checkpoint")
    else:
        args[args.index("--feed") + 1] = "x=x2.npy"
        note.append("another feed file")
    return None


def job(args, out, first, second, wdir):
    command = MPIRUN + ["-np", "1", os.path.join(args.build, "bin", "cdp-run")] + first + [":"]
    command += ["-np", "1"] + (["--wdir", wdir] if wdir else [])
    command += [os.path.join(args.build, "bin", "cdp-run")] + second
    try:
        result = subprocess.run(command, capture_output=True, timeout=args.timeout, cwd=out)
    except subprocess.TimeoutExpired:
        return None, "time limit"
    return result.returncode, (result.stdout + result.stderr).decode(errors="replace")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "other"))
    compile_bin = os.path.join(args.build, "bin", "cdp-compile")
    subprocess.run([sys.executable, os.path.join(ROOT, "test", "Import", "make_models.py"),
                    "mlp4eq", os.path.join(out, "model.onnx")], check=True, capture_output=True)
    for name, flags in [("dp", []), ("dp-lr", ["--lr", "0.5"]), ("dp-adam", ["--optimizer", "adam"])]:
        subprocess.run([compile_bin, os.path.join(out, "model.onnx"), "--strategy", "dp",
                        "--devices", "2", "-o", os.path.join(out, name + ".cdp")] + flags,
                       check=True, capture_output=True)
    import numpy as np
    rng_np = np.random.default_rng(0)
    for folder in ["", "other"]:
        np.save(os.path.join(out, folder, "x.npy"),
                rng_np.standard_normal((64, 16)).astype(np.float32))
        np.save(os.path.join(out, folder, "y.npy"), np.tile(np.arange(16), 4))
        for plan in ["dp.cdp", "dp-lr.cdp", "dp-adam.cdp"] if folder else []:
            for name in (plan, plan + ".weights"):  # a plan and its weights file
                shutil.copy(os.path.join(out, name), os.path.join(out, folder, name))
    np.save(os.path.join(out, "x2.npy"), rng_np.standard_normal((64, 16)).astype(np.float32))
    shutil.copy(os.path.join(out, "x2.npy"), os.path.join(out, "other", "x2.npy"))
    rng = random.Random(args.seed)
    refused = controls = findings = 0
    for index in range(args.count):
        first, second, note, wdir = base(out), base(out), [], None
        control = index % 5 == 4
        if control:
            second += rng.choice([["--threads", "2"], ["--comm-timeout", "45"]])
            note.append("control: " + " ".join(second[-2:]))
        else:
            for _ in range(rng.randint(1, 2)):
                wdir = differ(rng, second, note) or wdir
            if wdir:
                wdir = os.path.join(out, wdir)
        code, output = job(args, out, first, second, wdir)
        lines = [line for line in output.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("cdp-run: error: ")]
        if control:
            ok = code == 0
            controls += ok
        else:
            ok = (code not in (0, None) and len(errors) == 1 and
                  errors[0].startswith("cdp-run: error: mpirun's process 1 ") and
                  not any("loss" in line for line in lines))
            refused += ok
        if not ok:
            findings += 1
            print("finding (%s): exit %s: %s\n%s" % (", ".join(note), code, " ".join(second),
                                                    output), file=sys.stderr)
    print("mismatch-ranks: %d jobs: %d disagreeing jobs refused in one line, %d controls trained, "
          "%d findings" % (args.count, refused, controls, findings))


if __name__ == "__main__":
    main()
