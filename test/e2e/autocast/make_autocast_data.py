#!/usr/bin/env python3
"""Makes the mixed-precision test data: PyTorch autocast runs to compare
`cdp-compile --precision bf16` (and, with --fp16, `--precision fp16`) with.

Usage: test/e2e/autocast/make_autocast_data.py [--fp16] [CASE ...]

Runs in the venv of test/e2e/hf/make_hf_data.py (bench/.venv-export, made
on first use; today's torch, whose CPU bf16 products accumulate in float32
and round once, as a GPU's do: Debian's torch 1.13 accumulates in bf16).
Nothing here runs in CI; the suite reads what it writes.

The policy. cdp follows autocast's GPU op lists (products and convolutions
in bf16; softmax, log-softmax, layer/group norm, sum, cumsum, exp, log,
pow, reciprocal, rsqrt and the losses in float32; the rest in the type of
their inputs). PyTorch's CPU autocast keeps fewer ops in float32 (softmax
and layer norm run in bf16 there), so the references run torch.autocast
on the CPU with the GPU's float32 list registered for the AutocastCPU key:
PyTorch's mixed precision as it runs on a GPU, computed on the CPU.

Cases and what each writes (3 SGD steps, lr 0.1, mean cross-entropy):

  e2e models (mlp, lenet, resnet, transformer of
  test/e2e/export_torch_models.py; batch 8): exported here with the
  TorchScript exporter (opset 14, training mode, no constant folding) to
  data/NAME/model.onnx, the batch to x.npy and y.npy, torch starting from
  the exported initializers;
  transformers (gpt2-ts, llama-ts, bert-ts, vit-ts of test/e2e/hf/data):
  the committed export and batches of make_hf_data.py, the model rebuilt
  with its seed and checked against the export's initializers;

each to autocast.npz: `bf16/NAME` the parameters after the steps under
autocast (float32 master weights), `f32/NAME` the same steps in float32,
the losses (`bf16loss`, `f32loss`), all float64, and `spread`: the L2
distance over all parameters between the bf16 run and the same run with
PyTorch's native convolutions instead of oneDNN's (other float32 sums, so
other bf16 roundings; batch norm spreads one changed rounding over its
channel): how close two correct implementations can be.

With --fp16 (from the committed exports and batches, nothing re-exported):
autocast16.npz, fp16 autocast with torch.amp.GradScaler (see
save_f16_references): the test of `--precision fp16` and of its forced
overflows, test/e2e/precision-fp16.test.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.dirname(HERE)
sys.path.insert(0, E2E)
sys.path.insert(0, os.path.join(E2E, "hf"))
import make_hf_data as hf  # noqa: E402

E2E_MODELS = ["mlp", "lenet", "resnet", "transformer"]
HF_CASES = ["gpt2-ts", "llama-ts", "bert-ts", "vit-ts"]
STEPS = 3
LR = 0.1
FP16 = False  # --fp16

# autocast's float32 list on CUDA (aten/src/ATen/autocast_mode.cpp), the
# overloads the models here reach.
GPU_FP32_OPS = [
    "softmax.int", "log_softmax.int", "layer_norm", "group_norm",
    "sum", "sum.dim_IntList", "cumsum", "exp", "log", "reciprocal", "rsqrt",
    "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "logsumexp",
    "mse_loss", "nll_loss", "cross_entropy_loss",
]


def register_gpu_policy():
    """Makes the listed ops compute in float32 under CPU autocast."""
    import torch
    library = torch.library.Library("aten", "IMPL")
    autocast_key = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def fp32(name):
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")

        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(autocast_key):
                args = [a.float() if isinstance(a, torch.Tensor) and
                        a.is_floating_point() else a for a in args]
                return op(*args, **kwargs)
        library.impl(name, kernel, "AutocastCPU")
    for name in GPU_FP32_OPS:
        fp32(name)

    # Convolutions as cuDNN computes them in bf16: rounded operands, float32
    # sums, one rounding of the result; autograd through the casts gives
    # the backward the same form. (The CPU's bf16 convolution sums in
    # blocks rounded to bf16, 1 % off in its backward.)
    def narrow(t):
        return None if t is None else t.to(torch.get_autocast_dtype("cpu")).float()

    def convolution(conv):
        def kernel(input, weight, bias=None, *args):
            with torch._C._ExcludeDispatchKeyGuard(autocast_key):
                return conv(narrow(input), narrow(weight), narrow(bias),
                            *args).to(torch.get_autocast_dtype("cpu"))
        return kernel
    library.impl("conv2d", convolution(torch.ops.aten.conv2d.default),
                 "AutocastCPU")
    library.impl("conv1d", convolution(torch.ops.aten.conv1d.default),
                 "AutocastCPU")
    # Batch norm as cuDNN's: float32 inside, the input's type out.
    def batch_norm(input, *args):
        with torch._C._ExcludeDispatchKeyGuard(autocast_key):
            return torch.ops.aten.batch_norm.default(
                input.float(), *args).to(input.dtype)
    library.impl("batch_norm", batch_norm, "AutocastCPU")
    return library  # kept alive: the registrations live as long as it


def exported_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                       is_causal=False, scale=None, enable_gqa=False):
    """scaled_dot_product_attention as the TorchScript exporter writes it
    (torch/onnx symbolic_opset14): q and k^T each times sqrt(scale), their
    product, the mask added, softmax, the product with v. Eager PyTorch's
    CPU kernels would compute it all in float32 instead, which the export
    cannot show."""
    import math
    import torch
    if enable_gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    root = math.sqrt(1 / math.sqrt(q.size(-1)) if scale is None else scale)
    scores = (q * root) @ (k.transpose(-2, -1) * root)
    if is_causal:
        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.where(attn_mask, 0.0, float("-inf"))
    if attn_mask is not None:
        scores = scores + attn_mask
    weights = torch.softmax(scores, -1)
    if dropout_p:
        weights = torch.nn.functional.dropout(weights, dropout_p)
    return weights @ v


def train(model, batches, autocast, dtype="bf16", scaling=None, steps=STEPS):
    """`steps` SGD steps; `batches(step)` gives (inputs, labels). With
    `scaling` (init_scale, growth_interval): fp16's GradScaler, whose scale
    after each step is returned too."""
    import contextlib
    import copy
    import torch
    model = copy.deepcopy(model)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    scaler = None
    if scaling:
        scaler = torch.amp.GradScaler("cpu", init_scale=scaling[0],
                                      growth_interval=scaling[1])
    losses, scales = [], []
    for step in range(steps):
        inputs, labels = batches(step)
        optimizer.zero_grad()
        narrow = torch.bfloat16 if dtype == "bf16" else torch.float16
        scope = (torch.autocast("cpu", dtype=narrow) if autocast
                 else contextlib.nullcontext())
        with scope:
            loss = hf.loss_of(model(*inputs), labels)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scales.append(scaler.get_scale())
        else:
            loss.backward()
            optimizer.step()
        losses.append(loss.item())
    params = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    return (params, losses, scales) if scaling else (params, losses)


def first_overflowing_scale(model, batches):
    """The smallest power of two whose first fp16 step overflows."""
    for k in range(16, 100):
        _, _, scales = train(model, batches, True, "f16", (2.0 ** k, 2000), steps=1)
        if scales[0] < 2.0 ** k:
            return 2.0 ** k
    raise SystemExit("no loss scale up to 2^99 overflows the first step")


def save_f16_references(model, batches, folder):
    """autocast16.npz: `f16/NAME` after the steps under fp16 autocast with
    GradScaler's defaults (scale 65536, growth interval 2000), `f16loss`,
    `f16scale` (the scale after each step) and `spread`: the larger of the
    distance with PyTorch's native convolutions (as above) and the distance
    after moving every initial weight by half a float32 step; and the
    forced overflows, `forced/NAME` and `forcedscale`: from `forced_init`,
    the smallest power of two whose first step overflows, growth interval 1
    (the first step skipped and the scale halved, the next doubling it)."""
    import copy
    import numpy as np
    import torch
    result = {}
    params, losses, scales = train(model, batches, True, "f16", (65536.0, 2000))
    for name, value in params.items():
        result["f16/" + name] = value
    result["f16loss"], result["f16scale"] = np.array(losses), np.array(scales)
    torch.backends.mkldnn.enabled = False
    other, _, _ = train(model, batches, True, "f16", (65536.0, 2000))
    torch.backends.mkldnn.enabled = True
    spreads = [np.sqrt(sum(((other[n] - result["f16/" + n]) ** 2).sum() for n in other))]
    # fp16's coarse steps at moderate magnitudes (2^-7 at 8) flip where a
    # value sits near a rounding boundary: how far PyTorch's own run moves
    # when every initial weight moves by half a float32 step (a sign drawn
    # per element) is the spread no two implementations can beat either.
    for seed in range(3):
        generator = torch.Generator().manual_seed(seed)
        moved = copy.deepcopy(model)
        with torch.no_grad():
            for p in moved.parameters():
                sign = torch.randint(0, 2, p.shape, generator=generator).float() * 2 - 1
                p.mul_(1 + sign * 2.0 ** -24)
        other, _, _ = train(moved, batches, True, "f16", (65536.0, 2000))
        spreads.append(np.sqrt(sum(((other[n] - result["f16/" + n]) ** 2).sum()
                                   for n in other)))
    result["spread"] = max(spreads)
    forced = first_overflowing_scale(model, batches)
    params, _, scales = train(model, batches, True, "f16", (forced, 1))
    for name, value in params.items():
        result["forced/" + name] = value
    result["forcedscale"], result["forced_init"] = np.array(scales), np.array(forced)
    np.savez_compressed(os.path.join(folder, "autocast16.npz"), **result)
    print("made", os.path.join(folder, "autocast16.npz"), "scales", scales,
          "from", forced, flush=True)


def save_references(model, batches, folder):
    import numpy as np
    import torch
    result = {}
    for key, autocast in (("bf16", True), ("f32", False)):
        params, losses = train(model, batches, autocast)
        for name, value in params.items():
            result["%s/%s" % (key, name)] = value
        result[key + "loss"] = np.array(losses)
    # How far PyTorch's bf16 run moves with its other convolution code
    # (native instead of oneDNN: other float32 summation orders, so other
    # roundings to bf16): the spread no two implementations can beat.
    torch.backends.mkldnn.enabled = False
    other, _ = train(model, batches, True)
    torch.backends.mkldnn.enabled = True
    result["spread"] = np.sqrt(sum(((other[n] - result["bf16/" + n]) ** 2).sum()
                                   for n in other))
    np.savez_compressed(os.path.join(folder, "autocast.npz"), **result)
    print("made", os.path.join(folder, "autocast.npz"), flush=True)


def initializers(path):
    import onnx
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t).copy()
            for t in onnx.load(path).graph.initializer}


def save(model, batches, folder):
    if FP16:
        save_f16_references(model, batches, folder)
    else:
        save_references(model, batches, folder)


def make_e2e(name):
    import numpy as np
    import torch
    import export_torch_models as models
    folder = os.path.join(HERE, "data", name)
    os.makedirs(folder, exist_ok=True)
    model, example, dynamic = models.build(name)
    path = os.path.join(folder, "model.onnx")
    if FP16:  # the committed export and batch
        models.load_exported(model, path)
        x = torch.from_numpy(np.load(os.path.join(folder, "x.npy")))
        y = torch.from_numpy(np.load(os.path.join(folder, "y.npy")))
        save(model, lambda step: ([x], y), folder)
        return
    torch.onnx.export(model, example, path, input_names=["input"],
                      output_names=["logits"], opset_version=14, dynamo=False,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, dynamic_axes=dynamic)
    models.load_exported(model, path)
    torch.manual_seed(1)
    x = torch.randn(*example.shape)
    batch = example.shape[1] if name == "transformer" else example.shape[0]
    y = torch.randint(0, 10, (batch,))
    np.save(os.path.join(folder, "x.npy"), x.numpy())
    np.save(os.path.join(folder, "y.npy"), y.numpy().astype(np.int64))
    save(model, lambda step: ([x], y), folder)


def make_hf(case):
    import numpy as np
    import torch
    model_name, _ = case.split("-", 1)
    folder = os.path.join(E2E, "hf", "data", case)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    model, names, inputs, labels = hf.MODELS[model_name](generator)
    wrapper = hf.Logits(model, names)
    stored = initializers(os.path.join(folder, "model.onnx"))
    matched = 0
    for name, parameter in wrapper.named_parameters(remove_duplicate=False):
        if name in stored:
            if not np.array_equal(stored[name], parameter.detach().numpy()):
                raise SystemExit("%s: %s differs from the committed export; "
                                 "remake it with make_hf_data.py" % (case, name))
            matched += 1
    if not matched:
        raise SystemExit("%s: no parameter of the model is in its export" % case)

    def batches(step):  # make_hf_data.py's rows [2t, 2t + 2) modulo 4
        start = (step * hf.BATCH) % hf.ROWS
        rows = slice(start, start + hf.BATCH)
        return [x[rows] for x in inputs], labels[rows]
    save(wrapper, batches, folder)


def main():
    hf.ensure_venv()
    import warnings
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--fp16", action="store_true",
                        help="write autocast16.npz (fp16 with GradScaler) "
                        "from the committed exports and batches")
    args = parser.parse_args()
    global FP16
    FP16 = args.fp16
    library = register_gpu_policy()  # noqa: F841
    import torch
    # The ops the exports decompose, decomposed the same way here: under
    # autocast each piece rounds its result (one fused kernel would round
    # once), as each ONNX node does.
    torch.nn.functional.scaled_dot_product_attention = exported_attention
    torch.nn.functional.silu = lambda x, inplace=False: x * torch.sigmoid(x)
    for case in args.cases or E2E_MODELS + HF_CASES:
        if case in E2E_MODELS:
            make_e2e(case)
        else:
            make_hf(case)


if __name__ == "__main__":
    main()
