"""Train a small MLP regressor with warm-up + cosine LR, global-norm clipping folded into the step, and dynamic
loss scaling, on the GPU; save a plot of the loss and the LR over the steps (matplotlib, if installed).

The loss is scaled as mixed-precision training would scale it, and a few steps get an overflowed gradient
planted on purpose: the scaler skips them whole and backs off its scale.
Run: python examples/train_schedule_clip_scaler.py [--steps N] [--plot FILE.png] [--device SEL]
"""
import argparse
import time

import numpy as np

import rlx_gpu
from rlx_gpu.tools.cli import describe
from rlx_gpu.schedules import warmup_cosine


def data(rng, n=2048):
    x = rng.uniform(-2, 2, (n, 4)).astype(np.float32)
    y = (np.sin(x[:, :1] * 2) + x[:, 1:2] * x[:, 2:3] - 0.5 * x[:, 3:4] ** 2).astype(np.float32)
    return x, y


def forward_backward(p, x, y, scale):
    h = np.tanh(x @ p["w1"] + p["b1"])
    out = h @ p["w2"] + p["b2"]
    err = out - y
    loss = float(np.mean(err ** 2))
    d = (2 * err / len(y)) * scale  # the backward pass of the scaled loss
    grads = {"w2": h.T @ d, "b2": d.sum(0)}
    dh = (d @ p["w2"].T) * (1 - h ** 2)
    grads.update({"w1": x.T @ dh, "b1": dh.sum(0)})
    return loss, {k: v.astype(np.float32) for k, v in grads.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--plot", default="training.png", help="where to save the loss/LR plot ('' for none)")
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    x, y = data(rng)
    params = {"w1": (rng.standard_normal((4, 64)) * 0.5).astype(np.float32), "b1": np.zeros(64, np.float32),
              "w2": (rng.standard_normal((64, 1)) * 0.1).astype(np.float32), "b2": np.zeros(1, np.float32)}
    opt = rlx_gpu.AdamW(params, lr=3e-2, weight_decay=1e-4, clip_grad_norm=1.0, device=args.device)
    sched = warmup_cosine(opt, warmup_steps=args.steps // 10, total_steps=args.steps, start_factor=0.01)
    scaler = rlx_gpu.GradScaler(init_scale=2.0 ** 12, growth_interval=50)
    print(f"adapter: {opt.device.name} ({opt.device.info['backend']}, {opt.device.info['type']})")
    host = opt.read_params()
    losses, lrs, skipped = [], [], 0
    t0 = time.perf_counter()
    for step in range(args.steps):
        loss, grads = forward_backward(host, x, y, scaler.get_scale())
        if step in (args.steps // 3, args.steps // 2):
            grads["w1"][0, 0] = np.inf  # an overflow, as a too-large loss scale would give in fp16
        lrs.append(sched.get_last_lr()[0])
        scaler.step(opt, grads)
        skipped += opt.last_step_skipped
        scaler.update()
        sched.step()
        host = opt.read_params(out=host)
        losses.append(loss)
        if step % 50 == 0:
            print(f"step {step:4d}  loss {loss:.4f}  lr {lrs[-1]:.2e}  scale {scaler.get_scale():.0f}  "
                  f"grad norm {opt.last_grad_norm():.3f}")
    final = forward_backward(host, x, y, 1.0)[0]
    print(f"final loss {final:.4f} ({losses[0]:.4f} at the start), {skipped} steps skipped, "
          f"{args.steps} steps in {time.perf_counter() - t0:.1f} s")
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed (pip install rlx_gpu[plot]); no plot written")
        else:
            fig, ax = plt.subplots(figsize=(7, 4))
            ax.semilogy(losses, label="loss")
            ax.set_xlabel("step")
            ax.set_ylabel("loss")
            ax2 = ax.twinx()
            ax2.plot(lrs, color="tab:orange", label="lr")
            ax2.set_ylabel("lr")
            fig.legend(loc="upper right")
            fig.tight_layout()
            fig.savefig(args.plot, dpi=100)
            print(f"plot written to {args.plot}")
    return final, losses[0], skipped


if __name__ == "__main__":
    final, first, skipped = main()
    assert final < 0.2 * first and skipped == 2, (final, first, skipped)
