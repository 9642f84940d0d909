"""StiefelSGD on the GPU against the same update in torch on the same card (matrix-optimizer issue): one step
(momentum 0.9) over GPT-2 124M's 48 hidden matrices taken tall ((2304, 768), (768, 768), (3072, 768) twice, per
layer), for the QR retraction (Euclidean) and the Cayley retraction (canonical). torch runs geoopt's math
(RiemannianSGD's step on EuclideanStiefel / CanonicalStiefel, transcribed: geoopt is not on the device machine):
torch.linalg.qr, and the n x n torch.linalg.solve of the Cayley step. GPU timestamps; alternating rounds.

    python benchmarks/stiefel_bench.py [--rounds 3] [--div 1] [--json out.json]
"""
import numpy as np

import rlx_gpu
from rlx_gpu.tools.bench.baselines import cuda_ms, matrix_bench_setup
from rlx_gpu.tools.bench.timing import alternating, report

HIDDEN = [(2304, 768), (768, 768), (3072, 768), (3072, 768)] * 12


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


def main():
    args, dev, timer, torch = matrix_bench_setup(__doc__)
    rng = np.random.default_rng(0)
    shapes = [(r // args.div, c // args.div) for r, c in HIDDEN]
    params = {}
    for i, (r, c) in enumerate(shapes):
        q, rr = np.linalg.qr(rng.standard_normal((r, c)))
        params[f"w{i}"] = (q * np.sign(np.diag(rr))).astype(np.float32)
    grads = {k: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for k, v in params.items()}
    figures = {}
    for man in ("euclidean", "canonical"):
        opt = rlx_gpu.StiefelSGD(params, lr=1e-2, momentum=0.9, manifold=man, device=dev)
        for k, g in grads.items():
            opt.grads[k].write(g)
        figures[f"{man}_ms"] = (lambda o=opt: timer.calibrated(o.step, 3, probe=1)[0] * 1e3)
        if torch is not None:
            xs = [torch.tensor(v, device="cuda") for v in params.values()]
            gs = [torch.tensor(v, device="cuda") for v in grads.values()]
            bs = [torch.zeros_like(x) for x in xs]
            figures[f"torch_{man}_ms"] = (lambda m=man, xs=xs, gs=gs, bs=bs: cuda_ms(
                torch, lambda: torch_step(torch, xs, gs, bs, 1e-2, 0.9, m), 3, steps=3, warmup=1))
    med, got = alternating(figures, args.rounds)
    out = {"adapter": dev.name, "shapes": sorted(set(shapes)), "matrices": len(shapes), "figures": med, "all": got}
    for man in ("euclidean", "canonical"):
        if f"torch_{man}_ms" in med:
            out[f"{man}_vs_torch"] = med[f"torch_{man}_ms"] / med[f"{man}_ms"]
    report(out, args.json)


if __name__ == "__main__":
    main()
