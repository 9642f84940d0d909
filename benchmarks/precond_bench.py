"""SOAP and Kron on the GPU against pytorch_optimizer's SOAP and Kron (torch on CUDA, the same card) on GPT-2 124M's 48
hidden matrices (matrix-optimizer issue): wall-clock milliseconds per step averaged over ``--steps`` consecutive
steps, which include SOAP's refresh (precondition_frequency 10: one power iteration + QR in every 10 steps; the first
step's eigendecompositions are in the warm-up) and Kron's preconditioner update (probability 1, the first 500 steps'
default). Alternating rounds; the device synchronised at the ends of each window.

    python benchmarks/precond_bench.py [--steps 10] [--rounds 3] [--div 1] [--only soap,kron] [--json out.json]
"""
import numpy as np

import rlx_gpu
from rlx_gpu.bench.baselines import matrix_bench_setup, wall_ms
from rlx_gpu.bench.timing import alternating, report

HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12  # GPT-2 124M's attention and MLP matrices


def extra(ap):
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", default="soap,kron")


def main():
    args, dev, _, torch = matrix_bench_setup(__doc__, extra)
    rng = np.random.default_rng(0)
    shapes = [(r // args.div, c // args.div) for r, c in HIDDEN]
    params = {f"w{i}": (rng.standard_normal(s) * 0.02).astype(np.float32) for i, s in enumerate(shapes)}
    grads = {k: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for k, v in params.items()}
    po = None
    if torch is not None:
        try:
            import pytorch_optimizer as po
        except ImportError:
            po = None
    which = args.only.split(",")
    figures = {}
    kinds = {"soap": (rlx_gpu.SOAP, dict(lr=3e-3), "SOAP", {}),
             "kron": (rlx_gpu.Kron, dict(lr=1e-3, precond_update_prob=1.0), "Kron",
                      dict(pre_conditioner_update_probability=1.0))}
    for name in which:
        cls, kw, po_name, po_kw = kinds[name]
        opt = cls(params, device=dev, **kw)
        for k, g in grads.items():
            opt.grads[k].write(g)
        opt.step()  # (SOAP: the first step's eigendecompositions; Kron: its factors made)
        figures[f"{name}_ms"] = (lambda o=opt: wall_ms(o.step, dev.sync, args.steps, 1))
        if po is not None:
            tps = [torch.nn.Parameter(torch.tensor(v, device="cuda")) for v in params.values()]
            for t, g in zip(tps, grads.values()):
                t.grad = torch.tensor(g, device="cuda")
            to = getattr(po, po_name)(tps, **kw if name == "soap" else dict(lr=1e-3, **po_kw))
            to.step()
            torch.cuda.synchronize()
            figures[f"po_{name}_ms"] = (lambda o=to: wall_ms(o.step, torch.cuda.synchronize, args.steps, 1))
    med, got = alternating(figures, args.rounds)
    out = {"adapter": dev.name, "matrices": len(shapes), "steps_per_window": args.steps, "figures": med, "all": got}
    for name in which:
        if f"po_{name}_ms" in med:
            out[f"{name}_vs_pytorch_optimizer"] = med[f"po_{name}_ms"] / med[f"{name}_ms"]
    report(out, args.json)


if __name__ == "__main__":
    main()
