#!/usr/bin/env python3
"""GPT-2 small on one GPU: cdp in fp32 and bf16 against PyTorch eager and
torch.compile, with a plan that travels without its weights.

The GPU machine is reached through a 64 MiB carry, and GPT-2 small's
weights are 500 MB, so its parameters are drawn from a seed with NumPy
(normal(0, 0.02) weights, LayerNorm scales 1, biases 0: GPT-2's init) on
both machines: `prepare` puts them into the exported model before
compiling, and records how each plan's weights file is laid out (which
seeded tensor, or which few compressed bytes, lie at each offset); on the
GPU machine `weights` writes the files back from the seed and the recipe,
and cdp-run checks every value's checksum when it loads them. PyTorch's
model there is a plain-torch GPT-2 (no transformers) built from the same
seeded tensors.

  bench/gpu_gpt2.py prepare DIR [--build build] [--layers 12] [--seq 512] [--batch 8]
      (build machine, in bench/.venv-export: export, seed, compile fp32 and
      bf16 plans for --backend cuda; DIR then holds no weights)
  python3 DIR/gpu_gpt2.py weights DIR
      (anywhere with NumPy: the weights files from the seed, checked
      against the sizes and checksums `prepare` recorded)
  bench/gpu_gpt2.py check DIR [--build build]
      (build machine, Debian's python3 and torch: `weights`, then the first
      step's loss of cdp-run on the CPU backend, of a CPU plan compiled from
      the same seeded model, against the plain-torch GPT-2's, float32)
  python3 DIR/gpu_gpt2.py run DIR [--steps 20] [--profile-steps 5]
      (GPU machine, needs DIR/bin/cdp-run and DIR/lib from
      scripts/gpu-bundle.sh: the step times, one table; the measured GPU
      memory; then each plan's time per step by op and by place, from
      cdp-run --profile)

Not a test: `check` is what the suite cannot run (PyPI's transformers for
the export); docs/results.md carries its figures.
"""

import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20261129
ALIGN = 64  # the weights file's value alignment (docs/design/plan-format.md)
PLANS = {"fp32": [], "bf16": ["--precision", "bf16"]}
COMPILE_FLAGS = ["--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.01",
                 "--class-axis", "last"]


# --------------------------------------------------------------------------
# The seeded parameters
# --------------------------------------------------------------------------

def seeded(name, shape):
    """Parameter `name`'s initial value, the same bytes on every machine."""
    import numpy as np
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "bias":
        return np.zeros(shape, np.float32)
    if ".ln_" in name:
        return np.ones(shape, np.float32)
    rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)


def load_manifest(out):
    return json.load(open(os.path.join(out, "gpt2.json")))


def parameters(manifest):
    """Every trained parameter by its first name (the seed's), with its
    shape: a tied one (the embedding and the LM head) once."""
    return {p["name"]: seeded(p["name"], p["shape"]) for p in manifest["parameters"]}


# --------------------------------------------------------------------------
# prepare (export venv)
# --------------------------------------------------------------------------

def export(args, work):
    """GPT-2 small exported by TorchScript (opset 17, training mode) with its
    trained parameters replaced by the seeded ones."""
    import numpy as np
    import onnx
    import torch
    import transformers as T
    from onnx import numpy_helper
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test", "e2e", "hf"))
    import make_hf_data
    torch.manual_seed(0)
    config = T.GPT2Config(n_layer=args.layers, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    model = T.GPT2LMHeadModel(config)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), generator=generator)
    mask = torch.ones_like(ids)
    mask[:, -8:] = 0
    labels = make_hf_data.next_token_labels(ids, mask)
    wrapper = make_hf_data.Logits(model, ["input_ids", "attention_mask"])
    trainable = os.path.join(work, "trainable.txt")
    make_hf_data.write_trainable(wrapper, trainable)
    exported = os.path.join(work, "exported.onnx")
    make_hf_data.export(wrapper, ["input_ids", "attention_mask"], [ids, mask], "ts", exported)
    proto = onnx.load(exported)
    tied = [line.split() for line in open(trainable) if line.strip()]
    seed_of = {name: names[0] for names in tied for name in names}
    listed = []
    for index, tensor in enumerate(proto.graph.initializer):
        if tensor.name not in seed_of:
            continue
        value = seeded(seed_of[tensor.name], list(tensor.dims))
        proto.graph.initializer[index].CopyFrom(numpy_helper.from_array(value, tensor.name))
        if all(p["name"] != seed_of[tensor.name] for p in listed):
            listed.append({"name": seed_of[tensor.name], "shape": list(tensor.dims)})
    path = os.path.join(work, "model.onnx")
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    os.remove(exported)
    for name, value in [("input_ids", ids), ("attention_mask", mask), ("labels", labels)]:
        np.save(os.path.join(work, name + ".npy"), value.numpy())
    return path, {"layers": args.layers, "heads": config.n_head, "width": config.n_embd,
                  "vocabulary": config.vocab_size, "seq": args.seq, "batch": args.batch,
                  "parameters": listed}


def compile_plan(build, model, work, name, extra):
    plan = os.path.join(work, name + ".cdp")
    subprocess.run([os.path.join(build, "bin", "cdp-compile"), model, "-o", plan,
                    "--trainable-from", os.path.join(work, "trainable.txt"),
                    "--report", os.path.join(work, name + ".json")] + COMPILE_FLAGS + extra,
                   check=True, stdout=subprocess.DEVNULL)
    return plan


def recipe_of(path, values):
    """How to write `path` back: its 64-byte header, then segments, each a
    seeded parameter (by name) or compressed bytes (what no parameter
    explains: constants, padding)."""
    data = open(path, "rb").read()
    by_head = {}
    for name, value in values.items():
        by_head.setdefault(value.tobytes()[:ALIGN], []).append(name)
    segments, pending, at = [], bytearray(), ALIGN

    def flush():
        if pending:
            segments.append({"bytes": base64.b64encode(zlib.compress(bytes(pending), 9)).decode()})
            pending.clear()

    while at < len(data):
        names = by_head.get(data[at:at + ALIGN], [])
        # Longest first: zero biases of several sizes share their first bytes.
        match = max((n for n in names if data[at:at + values[n].nbytes] == values[n].tobytes()),
                    key=lambda n: values[n].nbytes, default=None)
        if match is None:
            pending += data[at:at + ALIGN]
            at += ALIGN
            continue
        flush()
        segments.append({"seeded": match})
        end = at + values[match].nbytes
        padded = (end + ALIGN - 1) // ALIGN * ALIGN
        pending += data[end:padded]
        at = padded
    flush()
    return {"file": os.path.basename(path), "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "header": base64.b64encode(data[:ALIGN]).decode(), "segments": segments}


def prepare(args):
    out = os.path.abspath(args.out)
    work = os.path.join(out, "gpt2")
    os.makedirs(work, exist_ok=True)
    model, manifest = export(args, work)
    values = parameters(manifest)
    manifest["recipes"] = {}
    for name, extra in PLANS.items():
        plan = compile_plan(args.build, model, work, "gpt2-" + name, ["--backend", "cuda"] + extra)
        recipe = recipe_of(plan + ".weights", values)
        os.remove(plan + ".weights")
        manifest["recipes"][name] = recipe
        inline = sum(len(s.get("bytes", "")) for s in recipe["segments"])
        print("gpt2-%s: plan %d bytes, weights %d bytes from %d segments (%d bytes inline)" % (
            name, os.path.getsize(plan), recipe["size"], len(recipe["segments"]), inline))
    os.remove(model + ".data")
    os.remove(model)
    json.dump(manifest, open(os.path.join(out, "gpt2.json"), "w"))
    # This script, and gpu_step.py for cdp-run's CUDA libraries there.
    subprocess.run(["cp", os.path.abspath(__file__), os.path.join(HERE, "gpu_step.py"), out],
                   check=True)
    print("%s: %d bytes in all" % (out, sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)))


# --------------------------------------------------------------------------
# weights (anywhere with NumPy)
# --------------------------------------------------------------------------

def write_weights(out, recipe, values):
    path = os.path.join(out, "gpt2", recipe["file"])
    digest = hashlib.sha256()
    with open(path + ".part", "wb") as f:
        def put(chunk):
            f.write(chunk)
            digest.update(chunk)
        put(base64.b64decode(recipe["header"]))
        for segment in recipe["segments"]:
            if "seeded" in segment:
                put(values[segment["seeded"]].tobytes())
            else:
                put(zlib.decompress(base64.b64decode(segment["bytes"])))
    if os.path.getsize(path + ".part") != recipe["size"] or \
            digest.hexdigest() != recipe["sha256"]:
        os.remove(path + ".part")
        sys.exit("%s: the seeded values differ from the compiled ones (another NumPy?)" % path)
    os.replace(path + ".part", path)


def weights(out):
    manifest = load_manifest(out)
    values = parameters(manifest)
    for recipe in manifest["recipes"].values():
        write_weights(out, recipe, values)
    print("weights written: %s" % ", ".join(r["file"] for r in manifest["recipes"].values()))


# --------------------------------------------------------------------------
# PyTorch's GPT-2, from the same tensors
# --------------------------------------------------------------------------

def torch_gpt2(torch, manifest, device):
    """GPT-2 (transformers' GPT2LMHeadModel, dropout 0) in plain torch: the
    embedding tied to the LM head, Conv1D weights as [in, out], tanh GELU,
    attention masked causally and by the attention mask."""
    F = torch.nn.functional
    tensors = parameters(manifest)
    prefix = next(iter(tensors)).split("transformer.")[0]
    heads, layers = manifest["heads"], manifest["layers"]

    class GPT2(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterDict({
                name[len(prefix):].replace(".", "/"): torch.nn.Parameter(torch.from_numpy(value))
                for name, value in tensors.items()})

        def w(self, name):
            return self.p["transformer/" + name.replace(".", "/")]

        def linear(self, x, name):
            return torch.addmm(self.w(name + ".bias"), x.reshape(-1, x.shape[-1]),
                               self.w(name + ".weight")).reshape(*x.shape[:-1], -1)

        def norm(self, x, name):
            return F.layer_norm(x, x.shape[-1:], self.w(name + ".weight"),
                                self.w(name + ".bias"), 1e-5)

        def forward(self, ids, mask):
            batch, seq = ids.shape
            h = self.w("wte.weight")[ids] + self.w("wpe.weight")[:seq]
            causal = torch.ones(seq, seq, dtype=torch.bool, device=ids.device).tril()
            for l in range(layers):
                block = "h.%d." % l
                q, k, v = self.linear(self.norm(h, block + "ln_1"), block + "attn.c_attn").split(
                    h.shape[-1], dim=-1)
                q, k, v = (t.reshape(batch, seq, heads, -1).transpose(1, 2) for t in (q, k, v))
                scores = q @ k.transpose(-1, -2) / float(q.shape[-1]) ** 0.5
                low = torch.finfo(scores.dtype).min
                scores = torch.where(causal, scores, torch.tensor(low, dtype=scores.dtype,
                                                                  device=ids.device))
                scores = scores + (1.0 - mask[:, None, None, :].to(scores.dtype)) * low
                y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, seq, -1)
                h = h + self.linear(y, block + "attn.c_proj")
                m = F.gelu(self.linear(self.norm(h, block + "ln_2"), block + "mlp.c_fc"),
                           approximate="tanh")
                h = h + self.linear(m, block + "mlp.c_proj")
            return self.norm(h, "ln_f") @ self.w("wte.weight").t()

    return GPT2().to(device)


def feeds(out):
    import numpy as np
    return [np.load(os.path.join(out, "gpt2", n + ".npy"))
            for n in ("input_ids", "attention_mask", "labels")]


def torch_loss(torch, model, ids, mask, labels):
    logits = model(ids, mask)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                             labels.reshape(-1), ignore_index=-100)


def cdp_command(out, binary, plan, steps, extra=()):
    folder = os.path.join(out, "gpt2")
    command = [binary, os.path.join(folder, plan + ".cdp"), "--steps", str(steps)]
    for name in ("input_ids", "attention_mask", "labels"):
        command += ["--feed", "%s=%s" % (name, os.path.join(folder, name + ".npy"))]
    return command + list(extra)


def first_loss(metrics):
    return json.loads(open(metrics).readline())["loss"]


# --------------------------------------------------------------------------
# check (build machine, Debian python)
# --------------------------------------------------------------------------

def check(args):
    """The seeded weights written back load (cdp-run checks each value's
    checksum), and each plan, run on the CPU backend, takes the same first
    loss as the plain-torch GPT-2 (fp32 within 1e-5 relative; bf16 against
    torch.autocast on the CPU within 1e-2)."""
    import torch
    out = os.path.abspath(args.out)
    weights(out)
    manifest = load_manifest(out)
    ids, mask, labels = (torch.from_numpy(x) for x in feeds(out))
    model = torch_gpt2(torch, manifest, "cpu")
    failed = False
    for name, tolerance in (("fp32", 1e-5), ("bf16", 1e-2)):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16,
                                             enabled=name == "bf16"):
            reference = torch_loss(torch, model, ids, mask, labels).item()
        metrics = os.path.join(out, "gpt2", "check-metrics.jsonl")
        subprocess.run(cdp_command(out, os.path.join(args.build, "bin", "cdp-run"),
                                   "gpt2-" + name, 1, ["--backend", "cpu", "--metrics", metrics]),
                       check=True, stdout=subprocess.DEVNULL)
        ours = first_loss(metrics)
        os.remove(metrics)
        relative = abs(ours - reference) / abs(reference)
        failed = failed or relative > tolerance
        print("%s first loss: cdp-run (the cuda plan on the CPU backend) %.6f, plain-torch "
              "GPT-2 %.6f: %.1e relative (at most %.0e)" % (
                  name, ours, reference, relative, tolerance))
    if failed:
        sys.exit("a loss differs from PyTorch's by more than its tolerance")


# --------------------------------------------------------------------------
# run (GPU machine)
# --------------------------------------------------------------------------

def cdp_step_ms(out, env, plan, steps, extra=()):
    """Mean step time after 3 steps (the first runs each kernel, the second
    records the CUDA graphs under --cuda-graphs), and the first loss."""
    metrics = os.path.join("/tmp", plan + "-metrics.jsonl")
    subprocess.run(cdp_command(out, os.path.join(out, "bin", "cdp-run"), plan, steps + 3,
                               ["--backend", "cuda", "--metrics", metrics] + list(extra)),
                   check=True, stdout=subprocess.DEVNULL, env=env)
    rows = [json.loads(line) for line in open(metrics)]
    batch = load_manifest(out)["batch"]
    rates = [r["samples_per_s"] for r in rows[3:]]
    return 1e3 * sum(batch / r for r in rates) / len(rates), rows[0]["loss"]


def torch_step_ms(torch, out, steps, autocast, compiled):
    manifest = load_manifest(out)
    model = torch_gpt2(torch, manifest, "cuda").train()
    ids, mask, labels = (torch.from_numpy(x).cuda() for x in feeds(out))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = torch_loss(torch, model, ids, mask, labels)
        loss.backward()
        optimizer.step()
        return loss

    import gpu_step  # the bundle's (run put DIR on the path)
    ms, first = gpu_step.timed_step_ms(torch, step, steps, compiled, warmup=3)
    return ms, first.item()


def profile_plan(out, env, plan, steps):
    """Where the plan's step goes on this GPU, kernel by kernel."""
    path = os.path.join("/tmp", plan + "-profile.json")
    subprocess.run(cdp_command(out, os.path.join(out, "bin", "cdp-run"), plan, steps + 1,
                               ["--backend", "cuda", "--profile", path]),
                   check=True, stdout=subprocess.DEVNULL, env=env)
    import gpu_step  # the bundle's
    print("\n".join(["%s:" % plan] + gpu_step.profile_summary(path)))


def run(args):
    import torch
    out = os.path.abspath(args.out)
    sys.path.insert(0, out)
    import gpu_step  # the bundle's: cdp-run's CUDA libraries
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    weights(out)
    env = gpu_step.cdp_environment(out, torch)
    manifest = load_manifest(out)
    print("device %s, torch %s; GPT-2 %d layers, sequence %d, batch %d; %d steps" % (
        torch.cuda.get_device_name(), torch.__version__, manifest["layers"], manifest["seq"],
        manifest["batch"], args.steps))
    print("%-6s %10s %10s %12s %12s %14s %10s %10s" % (
        "", "cdp ms", "graphs ms", "eager ms", "compile ms", "graphs/compile", "cdp loss",
        "torch loss"))
    for name, autocast in (("fp32", False), ("bf16", True)):
        ours, loss = cdp_step_ms(out, env, "gpt2-" + name, args.steps)
        try:
            graphs, _ = cdp_step_ms(out, env, "gpt2-" + name, args.steps, ["--cuda-graphs"])
        except subprocess.CalledProcessError:
            graphs = float("nan")
        eager, reference = torch_step_ms(torch, out, args.steps, autocast, False)
        try:
            compiled, _ = torch_step_ms(torch, out, args.steps, autocast, True)
            ratio = "%.2f" % (graphs / compiled)
            compiled = "%.2f" % compiled
        except Exception as error:  # noqa: BLE001 (no Triton, say)
            compiled, ratio = "n/a (%s)" % type(error).__name__, "-"
        print("%-6s %10.2f %10.2f %12.2f %12s %14s %10.4f %10.4f" % (
            name, ours, graphs, eager, compiled, ratio, loss, reference))
    # GPU memory apart from the timed runs (nvidia-smi is sampled while it runs).
    context = gpu_step.empty_context_mib(env)
    print("GPU memory (MiB; an empty context's %d left out): measured, the report's "
          "allocated and resident" % context)
    for name in ("fp32", "bf16"):
        plan = "gpt2-" + name
        used, allocated, resident = gpu_step.measured_against_report(
            cdp_command(out, os.path.join(out, "bin", "cdp-run"), plan, 3,
                        ["--backend", "cuda"]),
            os.path.join("/tmp", plan + "-report.json"), env, context)
        print("%-6s %10d %12.1f %12.1f   measured/resident %.3f" % (
            name, used, allocated, resident, used / resident))
    if args.profile_steps > 0:
        for name in ("bf16", "fp32"):
            profile_plan(out, env, "gpt2-" + name, args.profile_steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["prepare", "weights", "check", "run"])
    parser.add_argument("out", help="the folder the bench lives in")
    parser.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--profile-steps", type=int, default=5,
                        help="run: then profile each plan kernel by kernel over these "
                             "steps (0: not)")
    args = parser.parse_args()
    {"prepare": prepare, "weights": lambda a: weights(os.path.abspath(a.out)),
     "check": check, "run": run}[args.command](args)


if __name__ == "__main__":
    main()
