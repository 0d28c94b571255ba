#!/usr/bin/env python3
"""Makes the transformer test data: exports and PyTorch's reference results.

Usage: test/e2e/hf/make_hf_data.py [--out test/e2e/hf/data] [CASE ...]

The suite (test/e2e/hf-transformers.test) compiles and trains the committed
files; this script is how they were made, with today's PyPI exporters. On
first use it makes a venv, bench/.venv-export, with torch, transformers,
timm, onnx and onnxscript from PyPI (the versions it ran with are written
to data/VERSIONS), and runs itself again inside it. Nothing here runs in CI.

Each case is a tiny Hugging Face model (random init, seed 0, dropout 0)
wrapped to return its logits (gpt2left: GPT-2 on left-padded batches, whose
first padded queries attend to no key), exported as the user guide says:

  ts:      torch.onnx.export(model, args, f, dynamo=False, opset_version=17,
                             training=torch.onnx.TrainingMode.TRAINING,
                             do_constant_folding=False)
  dynamo:  torch.onnx.export(model, args, f, dynamo=True, opset_version=18,
                             optimize=False)
  default: torch.onnx.export(model, args, f, dynamo=True) (the optimizer on:
           it folds and merges parameters; cdp must refuse it)
  tsfold:  the TorchScript exporter with its default constant folding (GPT-2's
           tied LM head becomes a transposed copy cdp must tie back)

and beside each model.onnx: the inputs and labels (.npy), trainable.txt (the
names of model.named_parameters()), and ref.npz: PyTorch's parameters after
3 SGD steps (lr 0.1, cross-entropy with ignore_index -100 over the logits'
last axis; batch 2, step t on rows [2t, 2t + 2) of the 4 fed) in float64 (`p64/NAME`), its float32 run's distance from them
(`err32/NAME`), the losses (`loss64`, `loss32`), and the same after one step
over both batches, their losses averaged (`dp64/NAME`, `dperr32/NAME`: what
dp over 2 devices and 1f1b over 2 micro-batches compute).
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
VENV = os.path.join(ROOT, "bench", ".venv-export")
PACKAGES = ["torch", "transformers", "timm", "onnx", "onnxscript", "numpy"]
VOCAB = 96
LR = 0.1
STEPS = 3
BATCH = 2  # the export's batch: one micro-batch
ROWS = 4   # fed rows: step t trains rows [2t, 2t + 2) modulo 4


def ensure_venv():
    python = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    if not os.path.exists(python):
        print("making %s with %s (once)" % (VENV, ", ".join(PACKAGES)), flush=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *PACKAGES], check=True)
    # The script that asked (this one, or a bench script importing it).
    os.execv(python, [python, os.path.abspath(sys.argv[0]), *sys.argv[1:]])


# --------------------------------------------------------------------------
# Models: (module, input names, inputs, labels)
# --------------------------------------------------------------------------

def token_batch(generator, length=8, left=False):
    """Two batches of 2 sequences; the second of each is padded (on the
    right, or with `left` on the left, as batched generation pads: a causal
    model's first padded rows then attend to no key at all)."""
    import torch
    ids = torch.randint(0, VOCAB, (ROWS, length), generator=generator)
    mask = torch.ones(ROWS, length, dtype=torch.long)
    if left:
        mask[1, :2] = 0
        mask[3, :3] = 0
    else:
        mask[1, length - 2:] = 0
        mask[3, length - 3:] = 0
    return ids, mask


def next_token_labels(ids, mask):
    import torch
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    labels[:, :-1][mask[:, 1:] == 0] = -100
    labels[mask == 0] = -100
    return labels


def gpt2(g, left=False):
    import transformers as T
    config = T.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=32,
                          resid_pdrop=0, embd_pdrop=0, attn_pdrop=0,
                          bos_token_id=0, eos_token_id=0)
    ids, mask = token_batch(g, left=left)
    return T.GPT2LMHeadModel(config), ["input_ids", "attention_mask"], [ids, mask], \
        next_token_labels(ids, mask)


def llama(g, left=False):
    import transformers as T
    config = T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                           max_position_embeddings=32, bos_token_id=0, eos_token_id=0)
    ids, mask = token_batch(g, left=left)
    return T.LlamaForCausalLM(config), ["input_ids", "attention_mask"], [ids, mask], \
        next_token_labels(ids, mask)


def bert(g):
    import torch
    import transformers as T
    config = T.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, vocab_size=VOCAB, max_position_embeddings=32,
                          hidden_dropout_prob=0, attention_probs_dropout_prob=0)
    ids, mask = token_batch(g)
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(ids.shape, generator=g) < 0.4
    labels[chosen] = torch.randint(0, VOCAB, ids.shape, generator=g)[chosen]
    labels[:, 0] = 7  # at least one counted position per sequence
    labels[mask == 0] = -100
    return T.BertForMaskedLM(config), ["input_ids", "attention_mask"], [ids, mask], labels


def vit(g):
    import torch
    import transformers as T
    config = T.ViTConfig(image_size=16, patch_size=4, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_labels=10,
                         hidden_dropout_prob=0, attention_probs_dropout_prob=0)
    pixels = torch.randn(ROWS, 3, 16, 16, generator=g)
    return T.ViTForImageClassification(config), ["pixel_values"], [pixels], \
        torch.tensor([3, 7, 1, 7])


def t5(g):
    import torch
    import transformers as T
    config = T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                        num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8,
                        dropout_rate=0, decoder_start_token_id=0, pad_token_id=0,
                        eos_token_id=1)
    ids, mask = token_batch(g)
    labels = torch.randint(2, VOCAB, (ROWS, 6), generator=g)
    decoder = torch.zeros_like(labels)
    decoder[:, 1:] = labels[:, :-1]
    return T.T5ForConditionalGeneration(config), \
        ["input_ids", "attention_mask", "decoder_input_ids"], [ids, mask, decoder], labels


def encoder(g):
    """A stock nn.TransformerEncoder language model whose causal mask is a
    buffer of -inf (torch's generate_square_subsequent_mask)."""
    import torch

    class EncoderLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, 32)
            layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0,
                                                     batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(32, VOCAB)
            self.register_buffer("causal", torch.nn.Transformer.generate_square_subsequent_mask(8))

        def forward(self, input_ids):
            return self.head(self.encoder(self.embed(input_ids), mask=self.causal))

    ids, mask = token_batch(g)
    return EncoderLM(), ["input_ids"], [ids], next_token_labels(ids, torch.ones_like(mask))


def maskbuf(g):
    """A model with its own 0/1 mask buffer (a user's causal mask as a float
    matrix), which a float initializer alone cannot tell from a weight."""
    import torch

    class MaskedMixer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, 16)
            self.mix = torch.nn.Parameter(torch.randn(8, 8) * 0.3)
            self.register_buffer("keep", torch.tril(torch.ones(8, 8)))
            self.head = torch.nn.Linear(16, VOCAB)

        def forward(self, input_ids):
            weights = (self.mix * self.keep).softmax(-1)
            return self.head(weights @ self.embed(input_ids))

    ids, mask = token_batch(g)
    return MaskedMixer(), ["input_ids"], [ids], next_token_labels(ids, torch.ones_like(mask))


def cnn(g):
    """The Conv/BatchNorm pattern of resnet18, mobilenet and efficientnet,
    narrow: dynamo exports BatchNorm in inference mode (and its optimizer
    folds it into the Conv), which cdp must refuse."""
    import torch
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(8, 10))
    return model, ["input"], [torch.randn(ROWS, 3, 8, 8, generator=g)], \
        torch.tensor([1, 2, 3, 4])


def recurrent(kind, bidirectional=False):
    """A language model over torch.nn.LSTM or GRU (batch_first, two layers)."""
    def build(g):
        import torch

        class RecurrentLM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(VOCAB, 16)
                layer = getattr(torch.nn, kind)
                self.rnn = layer(16, 24, num_layers=2, batch_first=True,
                                 bidirectional=bidirectional)
                self.head = torch.nn.Linear(48 if bidirectional else 24, VOCAB)

            def forward(self, input_ids):
                return self.head(self.rnn(self.embed(input_ids))[0])

        ids, mask = token_batch(g)
        return RecurrentLM(), ["input_ids"], [ids], next_token_labels(ids, torch.ones_like(mask))
    return build


MODELS = {"gpt2": gpt2, "llama": llama,
          "gpt2left": lambda g: gpt2(g, left=True), "llamaleft": lambda g: llama(g, left=True), "bert": bert, "vit": vit, "t5": t5,
          "encoder": encoder, "maskbuf": maskbuf, "cnn": cnn,
          "lstm": recurrent("LSTM"), "gru": recurrent("GRU"),
          "bilstm": recurrent("LSTM", bidirectional=True)}
# (model, exporter): what the suite checks. T5 has no dynamo case: torch's
# own exporter fails on it ("Cannot view a tensor ... as a tensor with shape",
# torch 2.15 and transformers 5.24), before cdp sees anything.
CASES = [(m, "ts") for m in ["gpt2", "llama", "bert", "vit", "t5", "encoder", "maskbuf"]] + \
        [(m, "dynamo") for m in ["gpt2", "llama", "bert", "vit", "cnn"]] + \
        [("gpt2", "default"), ("gpt2", "tsfold"), ("cnn", "default")] + \
        [("gpt2left", "ts"), ("gpt2left", "dynamo")] + \
        [(m, e) for m in ["lstm", "gru", "bilstm"] for e in ["ts", "ts14", "dynamo"]]


class Logits:
    """Wraps a model so that the export's only output is its logits."""

    def __new__(cls, model, names):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                kwargs = dict(zip(names, args))
                if not hasattr(model, "config"):  # a plain torch module
                    return self.m(*args)
                if "pixel_values" not in kwargs:
                    kwargs["use_cache"] = False
                return self.m(**kwargs).logits
        return Wrapper()


def export(wrapper, names, inputs, exporter, path):
    import torch
    common = dict(input_names=names, output_names=["logits"])
    if exporter in ("ts", "tsfold", "ts14"):
        torch.onnx.export(wrapper, tuple(inputs), path, dynamo=False,
                          opset_version=14 if exporter == "ts14" else 17,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=exporter == "tsfold", **common)
    elif exporter == "dynamo":
        torch.onnx.export(wrapper, tuple(inputs), path, dynamo=True, opset_version=18,
                          optimize=False, **common)
    else:
        torch.onnx.export(wrapper, tuple(inputs), path, dynamo=True, **common)


# --------------------------------------------------------------------------
# PyTorch's reference
# --------------------------------------------------------------------------

def loss_of(logits, labels):
    import torch
    flat = logits.reshape(-1, logits.shape[-1]) if logits.dim() > 2 else logits
    return torch.nn.functional.cross_entropy(flat, labels.reshape(-1), ignore_index=-100)


def train(wrapper, inputs, labels, dtype, steps, batches_per_step=1):
    """SGD as cdp runs it: step t's batches are rows [t·k·B, (t+1)·k·B)
    modulo the rows, k batches of B a step (dp's devices, 1f1b's
    micro-batches), the step's loss their losses' mean."""
    import copy
    import torch
    model = copy.deepcopy(wrapper).to(dtype)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    cast = [x.to(dtype) if x.is_floating_point() else x for x in inputs]
    losses, batch = [], 0
    for _ in range(steps):
        optimizer.zero_grad()
        total = 0
        for _ in range(batches_per_step):
            rows = slice((batch * BATCH) % ROWS, (batch * BATCH) % ROWS + BATCH)
            total = total + loss_of(model(*[x[rows] for x in cast]), labels[rows])
            batch += 1
        loss = total / batches_per_step
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {n: p.detach().double().numpy() for n, p in model.named_parameters()}, losses


def references(wrapper, inputs, labels):
    import numpy as np
    import torch
    result = {}
    p64, loss64 = train(wrapper, inputs, labels, torch.float64, STEPS)
    p32, loss32 = train(wrapper, inputs, labels, torch.float32, STEPS)
    d64, _ = train(wrapper, inputs, labels, torch.float64, 1, batches_per_step=2)
    d32, _ = train(wrapper, inputs, labels, torch.float32, 1, batches_per_step=2)
    for name in p64:
        result["p64/" + name] = p64[name]
        result["err32/" + name] = np.abs(p32[name] - p64[name]).max()
        result["dp64/" + name] = d64[name]
        result["dperr32/" + name] = np.abs(d32[name] - d64[name]).max()
    result["loss64"] = np.array(loss64)
    result["loss32"] = np.array(loss32)
    return result


def write_trainable(model, path):
    """The user guide's recipe: one line per parameter torch trains, its
    names separated by spaces where it is tied (GPT-2's embedding and LM
    head): the exporters keep one of them."""
    import collections
    names = collections.defaultdict(list)
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names[id(parameter)].append(name)
    with open(path, "w") as f:
        f.write("\n".join(" ".join(n) for n in names.values()) + "\n")


def make_case(model_name, exporter, out):
    import numpy as np
    import torch
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    model, names, inputs, labels = MODELS[model_name](generator)
    wrapper = Logits(model, names)
    folder = os.path.join(out, "%s-%s" % (model_name, exporter))
    os.makedirs(folder, exist_ok=True)
    export(wrapper, names, [x[:BATCH] for x in inputs], exporter,
           os.path.join(folder, "model.onnx"))
    for name, value in zip(names, inputs):
        np.save(os.path.join(folder, name + ".npy"), value.numpy())
    np.save(os.path.join(folder, "labels.npy"), labels.numpy())
    write_trainable(wrapper, os.path.join(folder, "trainable.txt"))
    with open(os.path.join(folder, "inputs.txt"), "w") as f:
        f.write(" ".join(names) + "\n")
    if exporter in ("ts", "ts14", "dynamo", "tsfold") and model_name != "cnn":
        np.savez_compressed(os.path.join(folder, "ref.npz"),
                            **references(wrapper, inputs, labels))
    print("made", folder, flush=True)


def main():
    ensure_venv()
    import warnings
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(HERE, "data"))
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args()
    import onnx
    import onnxscript
    import torch
    import transformers
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "VERSIONS"), "w") as f:
        f.write("torch %s\ntransformers %s\nonnx %s\nonnxscript %s\n" % (
            torch.__version__, transformers.__version__, onnx.__version__,
            onnxscript.__version__))
    for model_name, exporter in CASES:
        if args.cases and "%s-%s" % (model_name, exporter) not in args.cases:
            continue
        make_case(model_name, exporter, args.out)


if __name__ == "__main__":
    main()
