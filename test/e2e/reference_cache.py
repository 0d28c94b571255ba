"""PyTorch's side of a test, computed once per content and reused.

scripts/test.sh runs the suites twice, on the plain tools and on the tools
built with ASan + UBSan, and the PyTorch references (exports, float64
gradients) are the same both times: only cdp's side differs. A test that
asks `entry(key, sources, make)` gets a directory holding what `make(dir)`
wrote there, computed on the first call and read back after it.

The key is a SHA-256 of the caller's key (model, seed, environment), of the
versions of torch, torchvision, NumPy and ONNX, and of the bytes of
`sources` (the scripts that compute the reference), so a changed script or
library computes anew. The cache lives
where CDP_REFERENCE_CACHE says (lit sets it to .cache/test-references in the
checkout, beside the build trees); unset, nothing is kept. Entries unused
for PRUNE_DAYS are removed when a new one is stored.
"""

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
import time

PRUNE_DAYS = 3


LIBRARIES = ("torch", "torchvision", "numpy", "onnx")


def _versions():
    """The versions of the libraries a reference rests on, read from their
    metadata (without importing torch, which a hit does not need)."""
    found = []
    for name in LIBRARIES:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            found.append((name, None))
    return found


def _digest(key, sources):
    h = hashlib.sha256()
    h.update(repr(_versions()).encode())
    for path in sources:
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    h.update(repr(key).encode())
    return h.hexdigest()[:40]


def _prune(root):
    cutoff = time.time() - PRUNE_DAYS * 86400
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if os.path.isdir(path) and os.path.getmtime(path) < cutoff:
            shutil.rmtree(path, ignore_errors=True)


def entry(key, sources, make, scratch):
    """The directory of `key`'s reference: `make(dir)` fills a new one.
    Without a cache the reference is made in `scratch` (created)."""
    root = os.environ.get("CDP_REFERENCE_CACHE")
    if not root:
        os.makedirs(scratch, exist_ok=True)
        make(scratch)
        return scratch
    final = os.path.join(root, _digest(key, sources))
    if os.path.isdir(final):
        os.utime(final)  # recently used: kept by _prune
        return final
    os.makedirs(root, exist_ok=True)
    _prune(root)
    partial = tempfile.mkdtemp(dir=root, prefix=".partial-")
    try:
        make(partial)
        os.rename(partial, final)  # whole or absent, never half-written
    except OSError:
        if not os.path.isdir(final):
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final
