"""Train the same small MLP regressor three ways on the GPU and compare the final losses: float32, bfloat16
parameters and grads with float32 master weights, and bfloat16 parameters, grads and moments with stochastic
rounding (no master copy: 4 bytes of state per parameter, against 8 in float32 and 12 with master weights).

Parameters, grads and moments are ``ml_dtypes.bfloat16`` arrays on the host (NumPy has no bfloat16); the forward
and backward passes here run in float32 on the host from the bfloat16 parameters, as a bf16 model's would.
Run: python examples/train_bfloat16.py [--steps N] [--device SEL]
"""
import argparse

import ml_dtypes
import numpy as np

import rlx_gpu
from rlx_gpu.tools.cli import describe

BF16 = ml_dtypes.bfloat16


def data(rng, n=2048):
    x = rng.uniform(-2, 2, (n, 4)).astype(np.float32)
    y = (np.sin(x[:, :1] * 2) + x[:, 1:2] * x[:, 2:3] - 0.5 * x[:, 3:4] ** 2).astype(np.float32)
    return x, y


def forward_backward(p, x, y):
    p = {k: v.astype(np.float32) for k, v in p.items()}
    h = np.tanh(x @ p["w1"] + p["b1"])
    err = h @ p["w2"] + p["b2"] - y
    d = 2 * err / len(y)
    dh = (d @ p["w2"].T) * (1 - h ** 2)
    grads = {"w2": h.T @ d, "b2": d.sum(0), "w1": x.T @ dh, "b1": dh.sum(0)}
    return float(np.mean(err ** 2)), grads


def train(params, steps, device, dtype, **options):
    opt = rlx_gpu.AdamW({k: v.astype(dtype) for k, v in params.items()}, lr=1e-2, weight_decay=1e-4,
                        device=device, **options)
    x, y = data(np.random.default_rng(1))
    host = opt.read_params()
    for _ in range(steps):
        loss, grads = forward_backward(host, x, y)
        opt.step({k: g.astype(dtype) for k, g in grads.items()})
        opt.read_params(out=host)
    return opt, forward_backward(host, x, y)[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    params = {"w1": (rng.standard_normal((4, 64)) * 0.5).astype(np.float32), "b1": np.zeros(64, np.float32),
              "w2": (rng.standard_normal((64, 1)) * 0.1).astype(np.float32), "b2": np.zeros(1, np.float32)}
    runs = {"float32": (np.float32, {}),
            "bf16 + fp32 master": (BF16, {"master_weights": True}),
            "bf16 states, stochastic rounding": (BF16, {"state_dtype": "bfloat16", "stochastic_rounding": True})}
    losses = {}
    for label, (dtype, options) in runs.items():
        opt, losses[label] = train(params, args.steps, args.device, dtype, **options)
        if label == "float32":
            print(f"adapter: {opt.device.name} ({opt.device.info['backend']}, {opt.device.info['type']})")
        mem = opt.memory()
        print(f"{label:34s} loss {losses[label]:.4f}, state {mem['state']:,} bytes on the device")
    first = losses["float32"]
    start = forward_backward(params, *data(np.random.default_rng(1)))[0]
    for label, loss in losses.items():  # every run learns, and bfloat16 ends near float32
        assert loss < 0.5 * start and loss < 2 * first + 0.02, (label, loss, start, first)
    print(f"final loss {losses['bf16 states, stochastic rounding']:.4f} (float32 {first:.4f}, from {start:.4f})")


if __name__ == "__main__":
    main()
