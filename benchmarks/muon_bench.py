"""Muon and the GEMM on the GPU against torch on the same card (issue 24): the float32 and float16 GEMMs at 4096^2
(TFLOP/s: the tiled float32 and gemm16 kernels, and the tensor-core GEMM where the device has subgroup matrices)
beside torch's float32 matmul without TF32, and a Muon step on GPT-2 124M's 48 hidden matrices with float16
Newton-Schulz (on the tensor cores where the device has them: Muon.ns_path says which; and on gemm16) and with
float32 Newton-Schulz, beside torch.optim.Muon (bfloat16 Newton-Schulz on tensor cores). GPU timestamps;
alternating rounds. On the H200 the tensor cores need Dawn (RLX_GPU_IMPLEMENTATION=dawn); run it again with
RLX_GPU_DAWN_DISABLE_ROBUSTNESS=1 for the figures without Dawn's robustness.

    python benchmarks/muon_bench.py [--n 4096] [--rounds 3] [--json out.json]
"""
import os

import numpy as np

import rlx_gpu
from rlx_gpu import linalg
from rlx_gpu.linalg import tc
from rlx_gpu.tools.bench.baselines import cuda_ms, matrix_bench_setup
from rlx_gpu.tools.bench.timing import alternating, report

HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12  # GPT-2 124M's attention and MLP matrices


def gemms(dev, timer, n):
    """The GEMM figures at n^3: float32 tiled, float16 gemm16, and the tensor-core GEMM (f16 -> f32) if any."""
    rng = np.random.default_rng(0)
    a, b = (dev.buffer(4 * n * n, k, data=rng.standard_normal(n * n).astype(np.float32)) for k in "ab")
    h = [dev.buffer(2 * n * n, f"h{i}", data=rng.standard_normal(n * n).astype(np.float16)) for i in range(2)]
    c, cache = dev.buffer(4 * n * n, "c"), {}

    def run(kind):
        enc, keep = dev.device.create_command_encoder(), []
        if kind == "tc":
            tc.tc_gemm(dev, enc, h[0], h[1], c, n, n, n, mode="subgroup-matrix", keep=keep, cache=cache)
        else:
            linalg.gemm(dev, enc, *((h[0], h[1]) if kind == "f16" else (a, b)), c, n, n, n, keep=keep,
                        f16=kind == "f16")
        dev.submit(enc)
    out = {"gemm_ms": lambda: timer.calibrated(lambda: run("f32"), 3, probe=1)[0] * 1e3,
           "gemm16_ms": lambda: timer.calibrated(lambda: run("f16"), 3, probe=1)[0] * 1e3}
    if tc.subgroup_matrix_size(dev) is not None:
        out["gemm_tc_ms"] = lambda: timer.calibrated(lambda: run("tc"), 3, probe=1)[0] * 1e3
    return out


def muons(dev, timer, params, rng):
    """The Muon figures: float32, float16 on the device's path (tensor cores where it has them) and on gemm16;
    every optimizer given the same grads on the device."""
    opts = {"muon_ms": rlx_gpu.Muon(params, lr=0.02, device=dev),
            "muon16_ms": rlx_gpu.Muon(params, lr=0.02, device=dev, ns_dtype="float16")}
    grads = {k: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for k, v in params.items()}
    for o in opts.values():
        o.write_grads(grads)
        o.step()  # (the compilations out of the first round's probe: else it times 1 step, host latency included)
    dev.sync()

    def step(opt, path=None):
        if path:  # (what "auto" means for float16 work: rlx_gpu.linalg.tc.PATH_ENV)
            os.environ[tc.PATH_ENV] = path
        try:
            return timer.calibrated(opt.step, 3, probe=1)[0] * 1e3
        finally:
            os.environ.pop(tc.PATH_ENV, None)
    out = {k: (lambda o=o: step(o)) for k, o in opts.items()}
    if opts["muon16_ms"].ns_path != "tiled":
        out["muon16_gemm16_ms"] = lambda: step(opts["muon16_ms"], "tiled")
    return out, opts["muon16_ms"].ns_path


def main():
    args, dev, timer, torch = matrix_bench_setup(
        __doc__, lambda ap: ap.add_argument("--n", type=int, default=4096))
    n = args.n
    rng = np.random.default_rng(2)
    params = {f"w{i}": (rng.standard_normal((r // args.div, c // args.div)) * 0.02).astype(np.float32)
              for i, (r, c) in enumerate(HIDDEN)}
    figures = gemms(dev, timer, n)
    muon_figures, ns_path = muons(dev, timer, params, rng)
    figures.update(muon_figures)
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        ta, tb = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        figures["torch_gemm_ms"] = lambda: cuda_ms(torch, lambda: ta @ tb, 5, steps=10, warmup=2)
        tps = [torch.nn.Parameter(torch.tensor(v, device="cuda")) for v in params.values()]
        for t in tps:
            t.grad = torch.randn_like(t) * 1e-3
        to = torch.optim.Muon(tps, lr=0.02)
        figures["torch_muon_ms"] = lambda: cuda_ms(torch, to.step, 5, steps=10, warmup=2)
    med, got = alternating(figures, args.rounds)
    flop = 2 * n ** 3
    out = {"adapter": dev.name, "implementation": dev.implementation, "robustness": dev.robustness,
           "muon16_ns_path": ns_path, "n": n, "figures": med, "all": got,
           **{k.replace("_ms", "_tflops"): flop / med[k] / 1e9 for k in ("gemm_ms", "gemm16_ms", "gemm_tc_ms")
              if k in med}}
    if "torch_gemm_ms" in med:
        out["torch_gemm_tflops"] = flop / med["torch_gemm_ms"] / 1e9
        out["gemm_vs_torch"] = med["torch_gemm_ms"] / med["gemm_ms"]
        for k in ("muon_ms", "muon16_ms", "muon16_gemm16_ms"):
            if k in med:
                out[k.replace("_ms", "_vs_torch")] = med["torch_muon_ms"] / med[k]
    report(out, args.json)


if __name__ == "__main__":
    main()
