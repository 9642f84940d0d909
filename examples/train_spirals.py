"""Train a small MLP on two interleaved spirals with rlx_gpu.AdamW stepping its weights on the GPU.

The forward and backward passes are plain NumPy; the parameters and AdamW's moments live on the GPU,
the gradients go up each step and the weights come back for the next forward pass.
Run: python examples/train_spirals.py [--steps N] [--device cpu|vulkan|...]
"""
import argparse
import time

import numpy as np

import rlx_gpu
from rlx_gpu.tools.cli import describe


def spirals(n, rng):
    t = np.sqrt(rng.uniform(0, 1, n)) * 3 * np.pi
    cls = rng.integers(0, 2, n)
    r = t / (3 * np.pi)
    angle = t + np.pi * cls
    x = np.stack([r * np.cos(angle), r * np.sin(angle)], 1) + rng.normal(0, 0.02, (n, 2))
    return x.astype(np.float32), cls


def init(rng, sizes):
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        params[f"l{i}.weight"] = (rng.standard_normal((a, b)) * np.sqrt(2 / a)).astype(np.float32)
        params[f"l{i}.bias"] = np.zeros(b, np.float32)
    return params


def loss_and_grads(p, x, y, layers):
    acts, h = [x], x
    for i in range(layers):
        h = h @ p[f"l{i}.weight"] + p[f"l{i}.bias"]
        if i < layers - 1:
            h = np.maximum(h, 0)
        acts.append(h)
    z = h - h.max(1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    loss = -np.log(prob[np.arange(len(y)), y] + 1e-12).mean()
    acc = (prob.argmax(1) == y).mean()
    d = prob
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    grads = {}
    for i in reversed(range(layers)):
        grads[f"l{i}.weight"] = (acts[i].T @ d).astype(np.float32)
        grads[f"l{i}.bias"] = d.sum(0).astype(np.float32)
        if i:
            d = (d @ p[f"l{i}.weight"].T) * (acts[i] > 0)
    return float(loss), float(acc), grads


def main(argv=None):
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--device", default=None, help="adapter selector (default: RLX_GPU_ADAPTER or the best)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    x, y = spirals(2000, rng)
    sizes = [2, 64, 64, 2]
    t0 = time.perf_counter()
    opt = rlx_gpu.AdamW(init(rng, sizes), lr=1e-2, weight_decay=1e-4, device=args.device)
    print(f"adapter: {opt.device.name} ({opt.device.info['backend']}, {opt.device.info['type']})")
    host = opt.read_params()
    for step in range(1, args.steps + 1):
        loss, acc, grads = loss_and_grads(host, x, y, len(sizes) - 1)
        if step == 1 or step % 50 == 0:
            print(f"step {step:4d}  loss {loss:.4f}  accuracy {acc:.3f}")
        opt.step(grads)
        host = opt.read_params(out=host)  # every parameter back in one transfer, into the same arrays
    loss, acc, _ = loss_and_grads(host, x, y, len(sizes) - 1)
    print(f"final loss {loss:.4f}, accuracy {acc:.3f}, {args.steps} steps in {time.perf_counter() - t0:.1f} s")
    return loss, acc


if __name__ == "__main__":
    loss, acc = main()
    assert acc > 0.9, f"the demo should separate the spirals (accuracy {acc:.3f})"
