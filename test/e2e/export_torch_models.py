#!/usr/bin/python3
"""Exports the reference models with Debian's torch 1.13 into a folder.

Usage: export_torch_models.py OUT_DIR [NAME ...]

Models (training-mode export, opset 14, do_constant_folding=False, as a
user exporting for training would):
  mlp          Linear-ReLU-Linear, symbolic batch dimension "batch"
  lenet        LeNet-style CNN that flattens with view()
  resnet       a small ResNet with BatchNorm and skip connections
  transformer  one nn.TransformerEncoderLayer (input (S, N, E), dropout 0)
  gelu         an MLP with both GELUs (erf, then tanh), which torch exports
               decomposed below opset 20 (not exported by default)
  rotary       Linear into 4 heads of 8, transformers' rotate-half rotary
               embedding (Slice, Slice, Neg, Concat, Mul, Mul, Add), the
               mean over the sequence, Linear (not exported by default)
  rmsnorm      Linear, Llama's RMSNorm (a module of its own, exported as
               Pow, ReduceMean, Add, Sqrt, Div, Mul, Cast, Mul), Linear
               (not exported by default)
"""

import os
import sys

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class GeluMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.act1 = nn.GELU()
        self.fc2 = nn.Linear(64, 32)
        self.act2 = nn.GELU(approximate="tanh")
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm, line for line."""

    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size) + 0.1 * torch.randn(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


class RmsNormMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.norm = RMSNorm(64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(x)))


class RotaryHeads(nn.Module):
    """A projection into heads through transformers' apply_rotary_pos_emb
    (Llama's rotate_half, its cos and sin tables as buffers), then a
    classifier over the sequence's mean."""

    def __init__(self, seq=8, heads=4, dim=8):
        super().__init__()
        self.proj = nn.Linear(32, heads * dim)
        self.head = nn.Linear(heads * dim, 10)
        self.heads, self.dim = heads, dim
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        freqs = torch.outer(torch.arange(seq).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)

    @staticmethod
    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, x):
        n, s, _ = x.shape
        q = self.proj(x).view(n, s, self.heads, self.dim).transpose(1, 2)
        q = q * self.cos + self.rotate_half(q) * self.sin
        return self.head(q.transpose(1, 2).reshape(n, s, -1).mean(dim=1))


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = x.view(x.size(0), -1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Block(nn.Module):
    def __init__(self, channels_in, channels_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                nn.BatchNorm2d(channels_out))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.layer1 = Block(8, 8, 1)
        self.layer2 = Block(8, 16, 2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                                dropout=0.0)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        # (S, N, E) -> classify from the mean over the sequence.
        return self.head(self.layer(x).mean(dim=0))


def build(name, batch=8):
    """(model, example input at `batch`, dynamic axes) of a reference model."""
    torch.manual_seed(0)
    if name == "mlp":
        return MLP(), torch.randn(batch, 784), {"input": {0: "batch"}}
    if name == "gelu":
        return GeluMLP(), torch.randn(batch, 784), None
    if name == "rotary":
        return RotaryHeads(), torch.randn(batch, 8, 32), None
    if name == "rmsnorm":
        return RmsNormMLP(), torch.randn(batch, 784), None
    if name == "lenet":
        return LeNet(), torch.randn(batch, 1, 28, 28), None
    if name == "resnet":
        return ResNet(), torch.randn(batch, 1, 28, 28), None
    if name == "transformer":
        return Transformer(), torch.randn(6, batch, 32), None
    raise SystemExit("unknown model " + name)


def export(name, out_dir, batch=8):
    model, example, dynamic = build(name, batch)
    path = os.path.join(out_dir, name + ".onnx")
    torch.onnx.export(model, example, path, input_names=["input"], output_names=["logits"],
                      opset_version=14, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, dynamic_axes=dynamic)
    return path


def load_exported(model, path):
    """Sets `model`'s parameters and buffers to the initializers of its ONNX
    export at `path` (a training-mode export's trace ran a forward, which
    moved BatchNorm's statistics; torch then starts where cdp does). Returns
    the loaded ONNX model."""
    import onnx
    from onnx import numpy_helper
    exported = onnx.load(path)
    state = {t.name: torch.tensor(numpy_helper.to_array(t).copy())
             for t in exported.graph.initializer}
    model.load_state_dict({k: state.get(k, v) for k, v in model.state_dict().items()})
    return exported


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[2:] or ["mlp", "lenet", "resnet", "transformer"]:
        print(export(name, out_dir))


if __name__ == "__main__":
    main()
