"""SOAP and Kron on the GPU against pytorch_optimizer's SOAP and Kron (torch on CUDA, the same card) on GPT-2 124M's 48
hidden matrices (matrix-optimizer issue): wall-clock milliseconds per step averaged over ``--steps`` consecutive
steps, which include SOAP's refresh (precondition_frequency 10: one power iteration + QR in every 10 steps; the first
step's eigendecompositions are in the warm-up) and Kron's preconditioner update (probability 1, the first 500 steps'
default), and the same without them (SOAP with no refresh in the window, Kron with update probability 0: the
GPU's share). The first step (SOAP's eigendecompositions) is timed once on its own. Alternating rounds; the device
synchronised at the ends of each window; figures printed as they come.

    python benchmarks/precond_bench.py [--steps 10] [--rounds 3] [--div 1] [--only soap,kron] [--json out.json]
"""
import time

import numpy as np

import rlx_gpu
from rlx_gpu.tools.bench.baselines import matrix_bench_setup, wall_ms
from rlx_gpu.tools.bench.timing import alternating, report

HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12  # GPT-2 124M's attention and MLP matrices


def extra(ap):
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", default="soap,kron")


def _loud(key, f):
    def run():
        v = f()
        print(key, round(v, 2), "ms", flush=True)
        return v
    return run


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
    kinds = {"soap": (rlx_gpu.SOAP, dict(lr=3e-3), "SOAP", {}, dict(precondition_frequency=10 ** 9)),
             "kron": (rlx_gpu.Kron, dict(lr=1e-3, precond_update_prob=1.0), "Kron",
                      dict(pre_conditioner_update_probability=1.0), dict(precond_update_prob=0.0))}
    first = {}
    for name in which:
        cls, kw, po_name, po_kw, quiet = kinds[name]
        for label, extra_kw in ((name, {}), (f"{name}_without_refresh", quiet)):
            opt = cls(params, device=dev, **{**kw, **extra_kw})
            for k, g in grads.items():
                opt.grads[k].write(g)
            t0 = time.perf_counter()
            opt.step()  # (SOAP: the first step's eigendecompositions; Kron: its factors made)
            dev.sync()
            first[f"{label}_first_step_ms"] = (time.perf_counter() - t0) * 1e3
            print(label, "first step", first[f"{label}_first_step_ms"], "ms", flush=True)
            figures[f"{label}_ms"] = (lambda o=opt: wall_ms(o.step, dev.sync, args.steps, 1))
        if po is not None:
            tps = [torch.nn.Parameter(torch.tensor(v, device="cuda")) for v in params.values()]
            for t, g in zip(tps, grads.values()):
                t.grad = torch.tensor(g, device="cuda")
            to = getattr(po, po_name)(tps, **kw if name == "soap" else dict(lr=1e-3, **po_kw))
            t0 = time.perf_counter()
            to.step()
            torch.cuda.synchronize()
            first[f"po_{name}_first_step_ms"] = (time.perf_counter() - t0) * 1e3
            figures[f"po_{name}_ms"] = (lambda o=to: wall_ms(o.step, torch.cuda.synchronize, args.steps, 1))
    figures = {k: _loud(k, f) for k, f in figures.items()}
    med, got = alternating(figures, args.rounds)
    out = {"adapter": dev.name, "matrices": len(shapes), "steps_per_window": args.steps, "figures": med, "all": got,
           "first_step": first}
    for name in which:
        if f"po_{name}_ms" in med:
            out[f"{name}_vs_pytorch_optimizer"] = med[f"po_{name}_ms"] / med[f"{name}_ms"]
    report(out, args.json)


if __name__ == "__main__":
    main()
