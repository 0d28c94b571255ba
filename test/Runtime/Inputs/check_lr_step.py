"""Checks one SGD-with-momentum step taken from a portable checkpoint
(argv[1]) at learning rate argv[4]: each parameter must be
w - lr * (0.9 * momentum_buffer + g), with w and the buffer from the
checkpoint and g the gradient the step applied (--dump-grads argv[2]),
as the resumed run wrote it (--dump-params argv[3]). Fails if the new rate
or the restored momentum were not applied."""
import json
import sys

import numpy as np

checkpoint, grads, params, lr = sys.argv[1], sys.argv[2], sys.argv[3], np.float32(sys.argv[4])
index = json.load(open(checkpoint + "/checkpoint.json"))
dumped = json.load(open(grads + "/index.json"))
trained = json.load(open(params + "/index.json"))
worst = 0.0
for t in index["tensors"]:
    name = t["name"]
    w = np.load(checkpoint + "/" + t["file"])
    buf = np.load(checkpoint + "/" + t["state"]["momentum_buffer"]["file"])
    g = np.load(grads + "/" + dumped[name])
    got = np.load(params + "/" + trained[name])
    worst = max(worst, float(np.abs(w - lr * (np.float32(0.9) * buf + g) - got).max()))
print("lr %g from the checkpoint's state: %s (max error %.1e)" % (lr, "applied" if worst <= 1e-6 else "WRONG", worst))
