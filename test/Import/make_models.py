#!/usr/bin/python3
"""Writes small ONNX models for the importer's lit tests.

Usage: make_models.py NAME OUT.onnx

Each NAME builds one model with onnx.helper (Debian's python3-onnx); the
bad-input models are written byte by byte where onnx.helper would refuse.
Run with Debian's /usr/bin/python3.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(graph, opset_imports=opsets, producer_name="cdp-tests")
    m.ir_version = 8
    return m


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def const_i64(name, values):
    return helper.make_node("Constant", [], [name],
                            value=init(name + "_v", np.array(values, dtype=np.int64)))


def unary(op, shape=(2, 3), opset=17, **attrs):
    return model([helper.make_node(op, ["x"], ["y"], **attrs)],
                 [vi("x", F, shape)], [vi("y", F, None)], opset=opset)


def binary(op, a=(2, 3, 4), b=(3, 1), opset=17):
    return model([helper.make_node(op, ["a", "b"], ["y"])],
                 [vi("a", F, a), vi("b", F, b)], [vi("y", F, None)], opset=opset)


MODELS = {}


def register(name):
    def wrap(fn):
        MODELS[name] = fn
        return fn
    return wrap


# --- One model per op --------------------------------------------------------

for _op in ["Relu", "Erf", "Tanh", "Sigmoid", "Sqrt", "Identity"]:
    MODELS[_op.lower()] = (lambda op: lambda: unary(op))(_op)
for _op in ["Add", "Sub", "Mul", "Div", "Pow"]:
    MODELS[_op.lower()] = (lambda op: lambda: binary(op))(_op)


@register("gelu")
def _():
    return unary("Gelu", opset=20, approximate="tanh")


@register("gemm")
def _():
    return model([helper.make_node("Gemm", ["a", "w", "c"], ["y"], alpha=0.5, transB=1)],
                 [vi("a", F, [4, 8])], [vi("y", F, None)],
                 [init("w", np.ones((16, 8), np.float32)), init("c", np.zeros(16, np.float32))])


@register("gemm_checked")
def _():
    # Like gemm, with every output shape declared, so onnx.checker accepts it.
    return model([helper.make_node("Gemm", ["a", "w", "c"], ["y"], alpha=0.5, transB=1)],
                 [vi("a", F, [4, 8])], [vi("y", F, [4, 16])],
                 [init("w", np.ones((16, 8), np.float32)), init("c", np.zeros(16, np.float32))])


@register("linear784")
def _():
    # A linear classifier of 28x28 images into 10 classes, batch 8.
    return model([helper.make_node("Gemm", ["x", "w", "b"], ["logits"], transB=1)],
                 [vi("x", F, [8, 784])], [vi("logits", F, [8, 10])],
                 [init("w", np.zeros((10, 784), np.float32)), init("b", np.zeros(10, np.float32))])


@register("mlp784")
def _():
    # 28x28 images through a 32-unit hidden layer into 10 classes, batch 8:
    # two stages for the pipelines' evaluation stream.
    rng = np.random.default_rng(3)
    return model([helper.make_node("Gemm", ["x", "w0", "b0"], ["h"], transB=1, name="fc0"),
                  helper.make_node("Relu", ["h"], ["r"], name="relu0"),
                  helper.make_node("Gemm", ["r", "w1", "b1"], ["logits"], transB=1, name="fc1")],
                 [vi("x", F, [8, 784])], [vi("logits", F, [8, 10])],
                 [init("w0", (rng.standard_normal((32, 784)) * 0.05).astype(np.float32)),
                  init("b0", np.zeros(32, np.float32)),
                  init("w1", (rng.standard_normal((10, 32)) * 0.2).astype(np.float32)),
                  init("b1", np.zeros(10, np.float32))])


@register("mlp4eq")
def _():
    # Four equal layers (16x16 Gemm + Tanh): equal stages for the report.
    nodes, inits, last = [], [], "x"
    for l in range(4):
        nodes += [helper.make_node("Gemm", [last, "w%d" % l, "b%d" % l], ["h%d" % l], name="fc%d" % l),
                  helper.make_node("Tanh", ["h%d" % l], ["t%d" % l], name="tanh%d" % l)]
        inits += [init("w%d" % l, np.eye(16, dtype=np.float32) * 0.5),
                  init("b%d" % l, np.zeros(16, np.float32))]
        last = "t%d" % l
    return model(nodes, [vi("x", F, [2, 16])], [vi(last, F, [2, 16])], inits)


@register("mlp4drop")
def _():
    # mlp4eq with training-mode Dropout (ratio 0.5) after every Tanh: the
    # masks decide the result, so strategies agree only if they draw the
    # same masks.
    nodes = [helper.make_node("Constant", [], ["ratio"], value=init("rv", np.array(0.5, np.float32))),
             helper.make_node("Constant", [], ["training"], value=init("tv", np.array(True)))]
    inits, last = [], "x"
    rng = np.random.default_rng(1)
    for l in range(4):
        nodes += [helper.make_node("Gemm", [last, "w%d" % l, "b%d" % l], ["h%d" % l], name="fc%d" % l),
                  helper.make_node("Tanh", ["h%d" % l], ["t%d" % l], name="tanh%d" % l),
                  helper.make_node("Dropout", ["t%d" % l, "ratio", "training"], ["d%d" % l],
                                   name="drop%d" % l)]
        inits += [init("w%d" % l, (rng.standard_normal((16, 16)) * 0.3).astype(np.float32)),
                  init("b%d" % l, np.zeros(16, np.float32))]
        last = "d%d" % l
    return model(nodes, [vi("x", F, [2, 16])], [vi(last, F, [2, 16])], inits)


@register("wide_input")
def _():
    # A wide input (2 x 2048) into a narrow layer, then a 8 -> 16 layer: the
    # first stage's backward reads the loaded input, which --device-memory's
    # per-stage estimate (weights, gradients, optimizer state and the
    # stage's own results) leaves out.
    nodes = [helper.make_node("Gemm", ["x", "w0", "b0"], ["h0"], name="fc0"),
             helper.make_node("Tanh", ["h0"], ["t0"], name="tanh0"),
             helper.make_node("Gemm", ["t0", "w1", "b1"], ["h1"], name="fc1"),
             helper.make_node("Tanh", ["h1"], ["t1"], name="tanh1")]
    rng = np.random.default_rng(0)
    inits = [init("w0", (rng.standard_normal((2048, 8)) * 0.02).astype(np.float32)),
             init("b0", np.zeros(8, np.float32)),
             init("w1", (rng.standard_normal((8, 16)) * 0.3).astype(np.float32)),
             init("b1", np.zeros(16, np.float32))]
    return model(nodes, [vi("x", F, [2, 2048])], [vi("t1", F, [2, 16])], inits)


@register("mlp4tied")
def _():
    # mlp4eq with the first layer's weight reused by the last (tied weights):
    # cut after every Tanh, w0 is used on stages 1 and 4.
    nodes, inits, last = [], [], "x"
    for l in range(4):
        weight = "w0" if l == 3 else "w%d" % l
        nodes += [helper.make_node("Gemm", [last, weight, "b%d" % l], ["h%d" % l], name="fc%d" % l),
                  helper.make_node("Tanh", ["h%d" % l], ["t%d" % l], name="tanh%d" % l)]
        if l < 3:
            inits.append(init("w%d" % l, np.eye(16, dtype=np.float32) * 0.5
                              + np.float32(0.01) * np.arange(256, dtype=np.float32).reshape(16, 16) / 256))
        inits.append(init("b%d" % l, np.zeros(16, np.float32)))
        last = "t%d" % l
    return model(nodes, [vi("x", F, [2, 16])], [vi(last, F, [2, 16])], inits)


@register("matmul")
def _():
    return binary("MatMul", a=(5, 1, 2, 3), b=(4, 3, 6))


@register("conv")
def _():
    return model([helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 2],
                                   auto_pad="SAME_UPPER", group=2)],
                 [vi("x", F, [1, 4, 7, 7])], [vi("y", F, None)],
                 [init("w", np.ones((6, 2, 3, 3), np.float32)), init("b", np.zeros(6, np.float32))],
                 opset=22)


@register("maxpool")
def _():
    return model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3],
                                   strides=[2, 2], ceil_mode=1)],
                 [vi("x", F, [1, 1, 6, 6])], [vi("y", F, None)], opset=22)


@register("averagepool")
def _():
    return model([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2],
                                   pads=[1, 1, 1, 1], count_include_pad=1)],
                 [vi("x", F, [2, 3, 4, 4])], [vi("y", F, None)])


@register("globalaveragepool")
def _():
    return unary("GlobalAveragePool", shape=(2, 3, 5, 5))


@register("batchnormalization")
def _():
    c = 3
    return model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                   ["y", "rm", "rv"], training_mode=1, momentum=0.9)],
                 [vi("x", F, [2, c, 4, 4])],
                 [vi("y", F, None), vi("rm", F, None), vi("rv", F, None)],
                 [init(n, np.ones(c, np.float32)) for n in ["s", "b", "m", "v"]], opset=15)


@register("layernormalization")
def _():
    return model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1,
                                   epsilon=1e-5)],
                 [vi("x", F, [2, 5, 8])], [vi("y", F, None)],
                 [init("s", np.ones(8, np.float32)), init("b", np.zeros(8, np.float32))])


@register("rmsnormalization")
def _():
    return model([helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1,
                                   epsilon=1e-6)],
                 [vi("x", F, [2, 5, 8])], [vi("y", F, None)],
                 [init("s", np.linspace(0.5, 1.5, 8).astype(np.float32))], opset=23)


@register("softmax")
def _():
    return unary("Softmax", shape=(2, 3, 4), axis=1)


@register("logsoftmax")
def _():
    return unary("LogSoftmax", shape=(2, 10))


@register("reshape")
def _():
    return model([const_i64("shape", [0, -1]), helper.make_node("Reshape", ["x", "shape"], ["y"])],
                 [vi("x", F, [2, 3, 4])], [vi("y", F, None)])


@register("flatten")
def _():
    return unary("Flatten", shape=(2, 3, 4, 5), axis=2)


@register("transpose")
def _():
    return unary("Transpose", shape=(2, 3, 4), perm=[2, 0, 1])


@register("concat")
def _():
    return model([helper.make_node("Concat", ["a", "b"], ["y"], axis=-1)],
                 [vi("a", F, [2, 3]), vi("b", F, [2, 5])], [vi("y", F, None)])


@register("split")
def _():
    return model([const_i64("sizes", [1, 3]), helper.make_node("Split", ["x", "sizes"], ["y0", "y1"], axis=1)],
                 [vi("x", F, [2, 4])], [vi("y0", F, None), vi("y1", F, None)])


@register("slice")
def _():
    return model([const_i64("st", [1, -1]), const_i64("en", [9223372036854775807, -9223372036854775807]),
                  const_i64("ax", [1, 2]), const_i64("sp", [2, -1]),
                  helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
                 [vi("x", F, [2, 6, 4])], [vi("y", F, None)])


@register("squeeze")
def _():
    return model([const_i64("axes", [1]), helper.make_node("Squeeze", ["x", "axes"], ["y"])],
                 [vi("x", F, [2, 1, 4])], [vi("y", F, None)])


@register("unsqueeze")
def _():
    return model([const_i64("axes", [0, -1]), helper.make_node("Unsqueeze", ["x", "axes"], ["y"])],
                 [vi("x", F, [2, 4])], [vi("y", F, None)])


@register("expand")
def _():
    return model([const_i64("shape", [2, 1, 6]), helper.make_node("Expand", ["x", "shape"], ["y"])],
                 [vi("x", F, [3, 1])], [vi("y", F, None)])


@register("gather")
def _():
    return model([helper.make_node("Gather", ["emb", "ids"], ["y"], axis=0)],
                 [vi("ids", I64, [2, 5])], [vi("y", F, None)],
                 [init("emb", np.ones((10, 4), np.float32))])


@register("cast")
def _():
    return model([helper.make_node("Cast", ["x"], ["y"], to=I64)],
                 [vi("x", F, [3])], [vi("y", I64, None)])


@register("shape")
def _():
    # Shape folds at import: the output is a constant.
    return model([helper.make_node("Shape", ["x"], ["y"], start=1)],
                 [vi("x", F, [2, 3, 4])], [vi("y", I64, None)], opset=15)


@register("constantofshape")
def _():
    return model([const_i64("s", [2, 3]),
                  helper.make_node("ConstantOfShape", ["s"], ["c"],
                                   value=init("v", np.array([1.5], np.float32))),
                  helper.make_node("Add", ["x", "c"], ["y"])],
                 [vi("x", F, [2, 3])], [vi("y", F, None)])


@register("reducemean")
def _():
    # opset 18: axes is an input.
    return model([const_i64("axes", [-1]), helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)],
                 [vi("x", F, [2, 3, 4])], [vi("y", F, None)], opset=18)


@register("reducemean_opset13")
def _():
    # Before opset 18, axes is an attribute.
    return model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[1])],
                 [vi("x", F, [2, 3, 4])], [vi("y", F, None)], opset=13)


@register("reducesum")
def _():
    return model([const_i64("axes", [0, 2]), helper.make_node("ReduceSum", ["x", "axes"], ["y"])],
                 [vi("x", F, [2, 3, 4])], [vi("y", F, None)], opset=13)


@register("dropout")
def _():
    return model([helper.make_node("Constant", [], ["r"], value=init("rv", np.array(0.25, np.float32))),
                  helper.make_node("Constant", [], ["t"], value=init("tv", np.array(True))),
                  helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=7)],
                 [vi("x", F, [2, 3])], [vi("y", F, None), vi("mask", TensorProto.BOOL, None)])


@register("dropout_initializers")
def _():
    # The ratio and training mode as initializers, as PyTorch's exporter
    # writes them with do_constant_folding.
    return model([helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=7)],
                 [vi("x", F, [2, 3])], [vi("y", F, None), vi("mask", TensorProto.BOOL, None)],
                 [init("r", np.array(0.25, np.float32)), init("t", np.array(True))])


@register("constant")
def _():
    return model([helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0]),
                  helper.make_node("Mul", ["x", "c"], ["y"])],
                 [vi("x", F, [2, 3])], [vi("y", F, None)])


@register("softmaxcrossentropyloss")
def _():
    return model([helper.make_node("SoftmaxCrossEntropyLoss", ["x", "labels"], ["loss", "logp"],
                                   reduction="mean", ignore_index=-1)],
                 [vi("x", F, [4, 10]), vi("labels", I64, [4])],
                 [vi("loss", F, None), vi("logp", F, None)], opset=13)


@register("negativeloglikelihoodloss")
def _():
    return model([helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["loss"],
                                   reduction="none")],
                 [vi("x", F, [4, 5, 2]), vi("t", I64, [4, 2])], [vi("loss", F, None)],
                 [init("w", np.ones(5, np.float32))], opset=22)


# --- Import behaviours --------------------------------------------------------

@register("shape_chain")
def _():
    # What torch emits for x.view(x.size(0), -1) with do_constant_folding=False.
    return model([helper.make_node("Shape", ["x"], ["s"]),
                  const_i64("zero", 0),
                  helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                  const_i64("ax", [0]),
                  helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
                  const_i64("minus1", [-1]),
                  helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
                  helper.make_node("Reshape", ["x", "shape"], ["y"])],
                 [vi("x", F, ["N", 3, 4, 4])], [vi("y", F, None)], opset=14)


@register("tied_weights")
def _():
    return model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                  helper.make_node("MatMul", ["h", "w"], ["y"])],
                 [vi("x", F, [2, 4])], [vi("y", F, None)], [init("w", np.eye(4, dtype=np.float32))])


@register("unsorted")
def _():
    return model([helper.make_node("Relu", ["h"], ["y"]),
                  helper.make_node("Add", ["x", "x"], ["h"])],
                 [vi("x", F, [3])], [vi("y", F, None)])


@register("chain50k")
def _():
    n = 50000
    nodes = [helper.make_node("Relu", ["t%d" % i if i else "x"], ["t%d" % (i + 1) if i + 1 < n else "y"])
             for i in range(n)]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, None)])


# --- Bad input ----------------------------------------------------------------

@register("unsupported_op")
def _():
    return unary("Hardmax")


@register("custom_domain")
def _():
    return model([helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")],
                 [vi("x", F, [2])], [vi("y", F, None)], domains=["com.example"])


@register("symbolic_batch")
def _():
    return unary("Relu", shape=("batch", 3))


@register("symbolic_inner")
def _():
    return unary("Relu", shape=(2, "features"))


@register("missing_shape")
def _():
    return model([helper.make_node("Relu", ["x"], ["y"])],
                 [helper.make_tensor_value_info("x", F, None)], [vi("y", F, None)])


@register("cycle")
def _():
    return model([helper.make_node("Add", ["x", "b"], ["a"]),
                  helper.make_node("Relu", ["a"], ["b"]),
                  helper.make_node("Relu", ["a"], ["y"])],
                 [vi("x", F, [2])], [vi("y", F, None)])


@register("undefined_tensor")
def _():
    return model([helper.make_node("Add", ["x", "ghost"], ["y"])],
                 [vi("x", F, [2])], [vi("y", F, None)])


@register("produced_twice")
def _():
    return model([helper.make_node("Relu", ["x"], ["y"], name="first"),
                  helper.make_node("Tanh", ["x"], ["y"], name="second")],
                 [vi("x", F, [2])], [vi("y", F, None)])


@register("no_outputs")
def _():
    return model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2])], [])


@register("opset_new")
def _():
    return unary("Relu", opset=26)


@register("opset_old")
def _():
    return unary("Relu", opset=9)


@register("shape_mismatch")
def _():
    return binary("Add", a=(2, 3), b=(4,))


@register("negative_dim")
def _():
    return unary("Relu", shape=(2, -3))


@register("overflow_dim")
def _():
    return unary("Relu", shape=(2**40, 2**40))


@register("huge_tensor")
def _():
    # 2^33 floats = 32 GiB: over the default --max-tensor-bytes.
    return unary("Relu", shape=(2**33,))


def _raw_initializer(raw, dims=(4,)):
    t = TensorProto()
    t.name = "w"
    t.data_type = F
    t.dims.extend(dims)
    t.raw_data = raw
    return t


@register("raw_data_length")
def _():
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", F, [4])],
                 [vi("y", F, None)], [_raw_initializer(b"\0" * 12)])


def _external(location, length=None):
    t = TensorProto()
    t.name = "w"
    t.data_type = F
    t.dims.extend([4])
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location)] + ([("length", str(length))] if length is not None else [])
    for key, value in entries:
        e = t.external_data.add()
        e.key, e.value = key, value
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", F, [4])],
                 [vi("y", F, None)], [t])


@register("external_ok")
def _():
    return _external("weights.bin")


@register("external_missing")
def _():
    return _external("no_such_file.bin")


@register("external_short")
def _():
    return _external("short.bin")


@register("external_absolute")
def _():
    return _external("/etc/passwd")


@register("external_escape")
def _():
    return _external("../outside.bin")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in MODELS and sys.argv[1] not in RAW:
        names = sorted(list(MODELS) + list(RAW))
        sys.exit("usage: make_models.py NAME OUT.onnx\nnames: " + " ".join(names))
    name, out = sys.argv[1], sys.argv[2]
    if name in RAW:
        with open(out, "wb") as f:
            f.write(RAW[name]())
        return
    m = MODELS[name]()
    with open(out, "wb") as f:
        f.write(m.SerializeToString())
    folder = os.path.dirname(os.path.abspath(out))
    if name == "external_ok":
        np.arange(4, dtype=np.float32).tofile(os.path.join(folder, "weights.bin"))
    if name == "external_short":
        np.arange(2, dtype=np.float32).tofile(os.path.join(folder, "short.bin"))


# Files that are not valid models at all.
RAW = {
    "empty": lambda: b"",
    "truncated": lambda: MODELS["conv"]().SerializeToString()[:-40],
    "random": lambda: np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
    "text": lambda: str(MODELS["relu"]()).encode(),
}

if __name__ == "__main__":
    main()
