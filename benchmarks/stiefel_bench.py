"""StiefelSGD on the GPU against the same update in torch on the same card (matrix-optimizer issue): one step
(momentum 0.9) over GPT-2 124M's 48 hidden matrices taken tall ((2304, 768), (768, 768), (3072, 768) twice, per
layer), for the QR retraction (Euclidean) and the Cayley retraction (canonical). torch runs geoopt's math
(RiemannianSGD's step on EuclideanStiefel / CanonicalStiefel, transcribed: geoopt is not on the device machine):
torch.linalg.qr, and the n x n torch.linalg.solve of the Cayley step. Ours for each ``--matmul-dtypes`` path
(float32; float16: the tangent projections' products in f16, the retractions in float32); the first step of each
timed on its own (the first of a process includes compiling the pipelines). GPU timestamps; alternating rounds,
stopped at ``--budget`` seconds; a variant that fails is one ``error`` line and a missing figure.

    python benchmarks/stiefel_bench.py [--rounds 3] [--div 1] [--matmul-dtypes float32,float16] [--no-baseline]
        [--budget SECONDS] [--json out.json]
"""
import numpy as np

import rlx_gpu
from rlx_gpu.tools.bench.baselines import cuda_ms, matrix_bench_setup
from rlx_gpu.runtime.implementation import implementation
from rlx_gpu.tools.bench.guarded import loud, rounds_until, variant, with_grads
from rlx_gpu.tools.bench.timing import report

HIDDEN = [(2304, 768), (768, 768), (3072, 768), (3072, 768)] * 12
TAGS = {"float32": "f32", "float16": "f16"}


def extra(ap):
    ap.add_argument("--matmul-dtypes", default="float32,float16")
    ap.add_argument("--no-baseline", action="store_true", help="no torch (timed in another run)")
    ap.add_argument("--budget", type=float, help="seconds for the alternating rounds (at least one round)")


def torch_step(torch, xs, gs, bufs, lr, mu, manifold):
    """geoopt's RiemannianSGD.step (momentum, no Nesterov) on each matrix, in torch."""
    for x, g, b in zip(xs, gs, bufs):
        if manifold == "euclidean":
            s = x.T @ g
            r = g - x @ (0.5 * (s + s.T))
        else:
            r = g - x @ g.T @ x
        b.mul_(mu).add_(r)
        u = -lr * b
        if manifold == "euclidean":
            q, rr = torch.linalg.qr(x + u)
            q *= torch.diagonal(rr).sign().add(0.5).sign()[None, :]
            s = q.T @ b
            b.copy_(b - q @ (0.5 * (s + s.T)))
            x.copy_(q)
        else:
            a = u @ x.T - x @ u.T
            v = torch.cat((x, b), -1)
            lhs = -0.5 * a
            lhs.diagonal().add_(1.0)
            out = torch.linalg.solve(lhs, v + 0.5 * a @ v)
            x.copy_(out[:, :x.shape[1]])
            b.copy_(out[:, x.shape[1]:])


def ours(args, dev, timer, params, grads, out):
    """The GPU variants (both retractions, each path) added to ``out``."""
    for man in ("euclidean", "canonical"):
        for dt in args.matmul_dtypes.split(","):
            variant(out, f"{man}_{TAGS[dt]}", lambda man=man, dt=dt: with_grads(rlx_gpu.StiefelSGD(
                params, lr=1e-2, momentum=0.9, manifold=man, device=dev, matmul_dtype=dt), grads), dev.sync,
                    lambda o: timer.calibrated(o.step, 3, probe=1)[0] * 1e3)


def main():
    args, dev, timer, torch = matrix_bench_setup(__doc__, extra)
    rng = np.random.default_rng(0)
    shapes = [(r // args.div, c // args.div) for r, c in HIDDEN]
    params = {}
    for i, (r, c) in enumerate(shapes):
        q, rr = np.linalg.qr(rng.standard_normal((r, c)))
        params[f"w{i}"] = (q * np.sign(np.diag(rr))).astype(np.float32)
    grads = {k: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for k, v in params.items()}
    out = {"adapter": dev.name, "implementation": implementation(), "shapes": sorted(set(shapes)),
           "matrices": len(shapes), "paths": {}, "first_step": {}, "figures": {}, "errors": {}}
    ours(args, dev, timer, params, grads, out)
    for man in ("euclidean", "canonical") if torch is not None and not args.no_baseline else ():
        xs = [torch.tensor(v, device="cuda") for v in params.values()]
        gs = [torch.tensor(v, device="cuda") for v in grads.values()]
        bs = [torch.zeros_like(x) for x in xs]
        out["figures"][f"torch_{man}_ms"] = (lambda m=man, xs=xs, gs=gs, bs=bs: cuda_ms(
            torch, lambda: torch_step(torch, xs, gs, bs, 1e-2, 0.9, m), 3, steps=3, warmup=1))
    figures = {k: loud(out["errors"], k, f) for k, f in out["figures"].items()}
    out["figures"], out["all"] = rounds_until(figures, args.rounds, args.budget)
    med = out["figures"]
    for man in ("euclidean", "canonical"):
        for tag in TAGS.values():
            if f"torch_{man}_ms" in med and f"{man}_{tag}_ms" in med:
                out[f"{man}_{tag}_vs_torch"] = med[f"torch_{man}_ms"] / med[f"{man}_{tag}_ms"]
    report(out, args.json)


if __name__ == "__main__":
    main()
