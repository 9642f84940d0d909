"""Muon and the GEMM on the GPU against torch on the same card (matrix-optimizer issue): the float32 and float16 GEMMs
at 4096^2 (TFLOP/s) beside torch's float32 matmul without TF32, and a Muon step (float32 and float16 Newton-Schulz)
on GPT-2 124M's 48 hidden matrices beside torch.optim.Muon (bfloat16 Newton-Schulz on tensor cores). GPU
timestamps; alternating rounds.

    python benchmarks/muon_bench.py [--n 4096] [--rounds 3] [--json out.json]
"""
import numpy as np

import rlx_gpu
from rlx_gpu import linalg
from rlx_gpu.tools.bench.baselines import cuda_ms, matrix_bench_setup
from rlx_gpu.tools.bench.timing import alternating, report

HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12  # GPT-2 124M's attention and MLP matrices


def main():
    args, dev, timer, torch = matrix_bench_setup(
        __doc__, lambda ap: ap.add_argument("--n", type=int, default=4096))
    n = args.n
    a = dev.buffer(4 * n * n, "a", data=np.random.default_rng(0).standard_normal(n * n).astype(np.float32))
    b = dev.buffer(4 * n * n, "b", data=np.random.default_rng(1).standard_normal(n * n).astype(np.float32))
    c = dev.buffer(4 * n * n, "c")

    h = [dev.buffer(2 * n * n, f"h{i}", data=np.random.default_rng(i).standard_normal(n * n).astype(np.float16))
         for i in range(2)] + [dev.buffer(2 * n * n, "h2")]

    def gemm(f16=False):
        enc, keep = dev.device.create_command_encoder(), []
        if f16:
            linalg.gemm(dev, enc, h[0], h[1], h[2], n, n, n, keep=keep, f16=True)
        else:
            linalg.gemm(dev, enc, a, b, c, n, n, n, keep=keep)
        dev.submit(enc)
    rng = np.random.default_rng(2)
    params = {f"w{i}": (rng.standard_normal((r // args.div, c // args.div)) * 0.02).astype(np.float32)
              for i, (r, c) in enumerate(HIDDEN)}
    opt = rlx_gpu.Muon(params, lr=0.02, device=dev)
    opt16 = rlx_gpu.Muon(params, lr=0.02, device=dev, ns_dtype="float16")
    for k, v in params.items():
        g = (rng.standard_normal(v.shape) * 1e-3).astype(np.float32)
        opt.grads[k].write(g)
        opt16.grads[k].write(g)
    figures = {"gemm_ms": lambda: timer.calibrated(gemm, 3, probe=1)[0] * 1e3,
               "gemm16_ms": lambda: timer.calibrated(lambda: gemm(True), 3, probe=1)[0] * 1e3,
               "muon_ms": lambda: timer.calibrated(opt.step, 3, probe=1)[0] * 1e3,
               "muon16_ms": lambda: timer.calibrated(opt16.step, 3, probe=1)[0] * 1e3}
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
    out = {"adapter": dev.name, "n": n, "figures": med, "all": got,
           "gemm_tflops": flop / med["gemm_ms"] / 1e9, "gemm16_tflops": flop / med["gemm16_ms"] / 1e9}
    if "torch_gemm_ms" in med:
        out["torch_gemm_tflops"] = flop / med["torch_gemm_ms"] / 1e9
        out["gemm_vs_torch"] = med["torch_gemm_ms"] / med["gemm_ms"]
        out["muon_vs_torch"] = med["torch_muon_ms"] / med["muon_ms"]
        out["muon16_vs_torch"] = med["torch_muon_ms"] / med["muon16_ms"]
    report(out, args.json)


if __name__ == "__main__":
    main()
