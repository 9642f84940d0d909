"""The float32 GEMM's staging variants (``rlx_gpu.linalg.record.PREFETCH``: 0 the first version, 1 the next K
slab's loads in registers while one is summed, 2 that without edge checks inside the operands; PERF_NOTES 76), side
by side in alternating rounds: TFLOP/s of float32 GEMMs at the shapes the matrix optimizers run (GPU timestamps),
then Muon, Kron and SOAP float32 steps on GPT-2 124M's 48 hidden matrices with each variant (wall clock over windows
of ``--steps`` steps: SOAP's include one refresh, Kron updates its factors every step), beside torch.optim.Muon and
pytorch_optimizer's Kron and SOAP on CUDA where torch has it. Rounds stop at ``--budget`` seconds.

    python benchmarks/gemm_staging.py [--variants 0,1,2] [--steps 10] [--rounds 3] [--budget 150] [--div 1]
        [--only gemm,muon,kron,soap] [--json out.json]
"""
import numpy as np

import rlx_gpu
from rlx_gpu import linalg
from rlx_gpu.linalg import record
from rlx_gpu.tools.bench.baselines import cuda_ms, matrix_bench_setup, wall_ms
from rlx_gpu.tools.bench.guarded import loud, rounds_until, variant, with_grads
from rlx_gpu.tools.bench.timing import report

HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12  # GPT-2 124M's attention and MLP matrices
# name: (M, N, K, batch, ta, tb) at --div 1
SHAPES = {"4096^3": (4096, 4096, 4096, 1, False, False),
          "muon_XXt_768x3072_x12": (768, 768, 3072, 12, False, True),
          "muon_BX_768x768x3072_x12": (768, 3072, 768, 12, False, False),
          "soap_GQ_768x3072x3072_x12": (768, 3072, 3072, 12, False, False),
          "kron_QtQ_3072^3_x2": (3072, 3072, 3072, 2, True, False),
          "qr_VtX_128x3072x3072_x12 (split K)": (128, 3072, 3072, 12, True, False)}


def extra(ap):
    ap.add_argument("--variants", default="0,1,2")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--budget", type=float, default=150.0)
    ap.add_argument("--only", default="gemm,muon,kron,soap")


def under(pf, fn):
    """``fn()`` with ``record.PREFETCH = pf`` (the GEMMs read it when they are recorded)."""
    def run(*a):
        old, record.PREFETCH = record.PREFETCH, pf
        try:
            return fn(*a)
        finally:
            record.PREFETCH = old
    return run


def gemm_figures(dev, timer, div, variants, out):
    rng = np.random.default_rng(0)
    for name, (M, N, K, batch, ta, tb) in SHAPES.items():
        M, N, K = max(8, M // div), max(8, N // div), max(8, K // div)
        a = dev.buffer(4 * batch * M * K, "a", data=rng.standard_normal(batch * M * K).astype(np.float32))
        b = dev.buffer(4 * batch * K * N, "b", data=rng.standard_normal(batch * K * N).astype(np.float32))
        c = dev.buffer(4 * batch * M * N, "c")
        flop = 2.0 * M * N * K * batch
        out["gemm_shapes"][name] = [M, N, K, batch, ta, tb]

        cache = {}  # (the shape's parameter buffers and bind groups, made once)

        def run(a=a, b=b, c=c, M=M, N=N, K=K, batch=batch, ta=ta, tb=tb, cache=cache):
            enc = dev.device.create_command_encoder()
            linalg.gemm(dev, enc, a, b, c, M, N, K, ta=ta, tb=tb, batch=batch, cache=cache)
            dev.submit(enc)
        for pf in variants:
            out["figures"][f"gemm_tflops pf{pf} {name}"] = under(pf, lambda run=run, flop=flop: flop / timer.calibrated(
                run, 3, probe=1)[0] / 1e12)


def step_figures(args, dev, torch, params, grads, variants, which, out):
    kinds = {"muon": (rlx_gpu.Muon, dict(lr=0.02)),
             "kron": (rlx_gpu.Kron, dict(lr=1e-3, precond_update_prob=1.0)),
             "soap": (rlx_gpu.SOAP, dict(lr=3e-3))}
    for name in which:
        cls, kw = kinds[name]
        for pf in variants:
            variant(out, f"{name}_f32_pf{pf}", under(pf, lambda cls=cls, kw=kw: with_grads(
                cls(params, device=dev, **kw), grads)), dev.sync,
                under(pf, lambda o: wall_ms(o.step, dev.sync, args.steps, 1)))
        if torch is None:
            continue
        tps = [torch.nn.Parameter(torch.tensor(v, device="cuda")) for v in params.values()]
        for t, g in zip(tps, grads.values()):
            t.grad = torch.tensor(g, device="cuda")
        if name == "muon":
            to = torch.optim.Muon(tps, lr=0.02)
            out["figures"]["torch_muon_ms"] = lambda to=to: cuda_ms(torch, to.step, 5, steps=10, warmup=2)
            continue
        try:
            import pytorch_optimizer as po
        except ImportError:
            continue
        make = (lambda tps=tps: po.Kron(tps, lr=1e-3, pre_conditioner_update_probability=1.0)) if name == "kron" else (
            lambda tps=tps: po.SOAP(tps, lr=3e-3))
        variant(out, f"po_{name}", make, torch.cuda.synchronize,
                lambda o: wall_ms(o.step, torch.cuda.synchronize, args.steps, 1))


def main():
    args, dev, timer, torch = matrix_bench_setup(__doc__, extra)
    variants = [int(v) for v in args.variants.split(",")]
    which = args.only.split(",")
    out = {"adapter": dev.name, "implementation": dev.implementation, "variants": variants, "gemm_shapes": {},
           "figures": {}, "first_step": {}, "paths": {}, "errors": {}}
    if "gemm" in which:
        gemm_figures(dev, timer, args.div, variants, out)
    rng = np.random.default_rng(2)
    params = {f"w{i}": (rng.standard_normal((r // args.div, c // args.div)) * 0.02).astype(np.float32)
              for i, (r, c) in enumerate(HIDDEN)}
    grads = {k: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for k, v in params.items()}
    step_figures(args, dev, torch, params, grads, variants, [w for w in which if w != "gemm"], out)
    figures = {k: loud(out["errors"], k, f) for k, f in out["figures"].items()}
    out["figures"], out["all"] = rounds_until(figures, args.rounds, args.budget)
    med = out["figures"]
    for k in list(med):
        if k.startswith(("muon_f32", "kron_f32", "soap_f32")):
            base = "torch_muon_ms" if k.startswith("muon") else f"po_{k[:4]}_ms"
            if base in med:
                out[f"{k[:-3]}_vs_baseline"] = med[base] / med[k]
    report(out, args.json)


if __name__ == "__main__":
    main()
