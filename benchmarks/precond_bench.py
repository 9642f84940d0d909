"""SOAP and Kron on the GPU against pytorch_optimizer's SOAP and Kron (torch on CUDA, the same card) on GPT-2 124M's 48
hidden matrices (matrix-optimizer issue): wall-clock milliseconds per step averaged over ``--steps`` consecutive
steps, which include SOAP's refresh (precondition_frequency 10: one power iteration + QR in every 10 steps; the first
step's eigendecompositions are in the warm-up) and Kron's preconditioner update (probability 1, the first 500 steps'
default), for each ``--matmul-dtypes`` path (float32; float16: the products' inputs in f16 on the tensor-core GEMM
where the adapter has subgroup matrices, else gemm16); and, on the first path, the same without them (SOAP with no
refresh in the window, Kron with update probability 0: the GPU's share). Each first step (SOAP's
eigendecompositions on the device, decompositions="device") is timed on its own: the first one of a process includes
compiling the pipelines, the later ones (``*_without_refresh``) not. Alternating rounds, stopped at ``--budget``
seconds; the device synchronised at the ends of each window; figures printed as they come; a variant that fails is one
``error`` line and a missing figure.

    python benchmarks/precond_bench.py [--steps 10] [--rounds 3] [--div 1] [--only soap,kron]
        [--matmul-dtypes float32,float16] [--no-baseline] [--budget SECONDS] [--json out.json]
"""
import numpy as np

import rlx_gpu
from rlx_gpu.runtime.implementation import implementation
from rlx_gpu.tools.bench.baselines import matrix_bench_setup, wall_ms
from rlx_gpu.tools.bench.guarded import loud, rounds_until, variant, with_grads
from rlx_gpu.tools.bench.timing import report

HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12  # GPT-2 124M's attention and MLP matrices
KINDS = {"soap": (rlx_gpu.SOAP, dict(lr=3e-3), "SOAP", {}, dict(precondition_frequency=10 ** 9)),
         "kron": (rlx_gpu.Kron, dict(lr=1e-3, precond_update_prob=1.0), "Kron",
                  dict(lr=1e-3, pre_conditioner_update_probability=1.0), dict(precond_update_prob=0.0))}
TAGS = {"float32": "f32", "float16": "f16"}


def extra(ap):
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", default="soap,kron")
    ap.add_argument("--matmul-dtypes", default="float32,float16")
    ap.add_argument("--no-baseline", action="store_true", help="no pytorch_optimizer (timed in another run)")
    ap.add_argument("--budget", type=float, help="seconds for the alternating rounds (at least one round)")


def ours(args, dev, params, grads, name, out):
    """The GPU variants of ``name`` (each path; the first also without refresh / updates) added to ``out``."""
    cls, kw, _, _, quiet = KINDS[name]
    for i, dt in enumerate(args.matmul_dtypes.split(",")):
        for label, extra_kw in ((f"{name}_{TAGS[dt]}", {}),) + (((f"{name}_{TAGS[dt]}_without_refresh", quiet),)
                                                               if i == 0 else ()):
            variant(out, label,
                    lambda dt=dt, ex=extra_kw: with_grads(cls(params, device=dev, matmul_dtype=dt, **{**kw, **ex}),
                                                          grads), dev.sync,
                    lambda o: wall_ms(o.step, dev.sync, args.steps, 1))


def baseline(args, torch, po, params, grads, name, out):
    """pytorch_optimizer's ``name`` on CUDA added to ``out``."""
    _, kw, po_name, po_kw, _ = KINDS[name]

    def make():
        tps = [torch.nn.Parameter(torch.tensor(v, device="cuda")) for v in params.values()]
        for t, g in zip(tps, grads.values()):
            t.grad = torch.tensor(g, device="cuda")
        return getattr(po, po_name)(tps, **(kw if name == "soap" else po_kw))
    variant(out, f"po_{name}", make, torch.cuda.synchronize,
            lambda o: wall_ms(o.step, torch.cuda.synchronize, args.steps, 1))


def main():
    args, dev, _, torch = matrix_bench_setup(__doc__, extra)
    rng = np.random.default_rng(0)
    shapes = [(r // args.div, c // args.div) for r, c in HIDDEN]
    params = {f"w{i}": (rng.standard_normal(s) * 0.02).astype(np.float32) for i, s in enumerate(shapes)}
    grads = {k: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for k, v in params.items()}
    po = None
    if torch is not None and not args.no_baseline:
        try:
            import pytorch_optimizer as po
        except ImportError:
            po = None
    which = args.only.split(",")
    out = {"adapter": dev.name, "implementation": implementation(), "matrices": len(shapes),
           "steps_per_window": args.steps, "paths": {}, "first_step": {}, "figures": {}, "errors": {}}
    for name in which:
        ours(args, dev, params, grads, name, out)
        if po is not None:
            baseline(args, torch, po, params, grads, name, out)
    figures = {k: loud(out["errors"], k, f) for k, f in out["figures"].items()}
    out["figures"], out["all"] = rounds_until(figures, args.rounds, args.budget)
    med = out["figures"]
    for name in which:
        for tag in TAGS.values():
            if f"po_{name}_ms" in med and f"{name}_{tag}_ms" in med:
                out[f"{name}_{tag}_vs_pytorch_optimizer"] = med[f"po_{name}_ms"] / med[f"{name}_{tag}_ms"]
    report(out, args.json)


if __name__ == "__main__":
    main()
