"""The GEMM's K step (PERF_NOTES 45): shaders/gemm.wgsl and gemm16.wgsl as shipped beside variants with a longer K
step (fewer barriers and tile loads per FMA), at 4096^3 and at Muon's 768-wide products (12 matrices a dispatch),
GPU timestamps, alternating rounds.

    python benchmarks/experiments/gemm_variants.py [--n 4096] [--rounds 3] [--json out.json]
"""
import argparse
import json

import numpy as np

import rlx_gpu
from rlx_gpu.tools.cli import describe
from rlx_gpu import linalg
from rlx_gpu.tools.bench.timing import Timer, alternating
from rlx_gpu.runtime import source
from rlx_gpu.runtime.kernels import get_kernel


def variants():
    f32, f16 = source.load_source("gemm.wgsl"), source.load_source("gemm16.wgsl")
    tk16 = (f32.replace("const TK: u32 = 8u;", "const TK: u32 = 16u;")
            .replace("array<vec4<f32>, 256>;  // [k][m / 4]", "array<vec4<f32>, 512>;  // [k][m / 4]")
            .replace("array<vec4<f32>, 256>;  // [k][n / 4]", "array<vec4<f32>, 512>;  // [k][n / 4]")
            .replace("for (var r = 0u; r < 4u; r++)", "for (var r = 0u; r < 8u; r++)"))
    tk32h = (f16.replace("const TK: u32 = 16u;", "const TK: u32 = 32u;")
             .replace("array<vec4<f16>, 512>;  // [k][m / 4]", "array<vec4<f16>, 1024>;  // [k][m / 4]")
             .replace("array<vec4<f16>, 512>;  // [k][n / 4]", "array<vec4<f16>, 1024>;  // [k][n / 4]")
             .replace("for (var r = 0u; r < 8u; r++)", "for (var r = 0u; r < 16u; r++)"))
    assert tk16 != f32 and tk32h != f16
    return {"f32_tk8": (f32, "gemm", 4), "f32_tk16": (tk16, "gemm", 4), "f16_tk16": (f16, "gemm16", 2),
            "f16_tk32": (tk32h, "gemm16", 2)}


def main():
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = rlx_gpu.get_device()
    timer = Timer(dev)
    cases = {"sq": (args.n, args.n, args.n, 1), "muonA": (768, 768, 3072, 12), "muonX": (768, 3072, 768, 12)}
    rng = np.random.default_rng(0)
    figures = {}
    for vname, (code, entry, size) in variants().items():
        k = get_kernel(dev, f"gemm_{vname}", code, entry)
        dt = np.float32 if size == 4 else np.float16
        for cname, (M, N, K, B) in cases.items():
            a = dev.buffer(size * B * M * K, "a", data=rng.standard_normal(B * M * K).astype(dt) * 0.1)
            b = dev.buffer(size * B * K * N, "b", data=rng.standard_normal(B * K * N).astype(dt) * 0.1)
            c = dev.buffer(size * B * M * N, "c")
            tn, tm = -(-N // 128), -(-M // 128)
            prm = np.array([M, N, K, 0, 0, 0, 0, 0, M * K, K * N, M * N, linalg._bits(1.0), 0, tn, tm, B], np.uint32)
            pb = dev.buffer(prm.nbytes, "prm", data=prm)
            bg = k.bind({"A": a, "B": b, "C": c, "prm": pb})

            def run(k=k, bg=bg, g=tn * tm * B):
                enc = dev.device.create_command_encoder()
                k.dispatch(enc, bg, g)
                dev.submit(enc)
            figures[f"{vname}_{cname}"] = (lambda run=run: timer.calibrated(run, 3, probe=1)[0] * 1e3)
    med, got = alternating(figures, args.rounds)
    tflops = {key: 2 * np.prod(cases[key.rsplit("_", 1)[1]][:3]) * cases[key.rsplit("_", 1)[1]][3] / ms / 1e9
              for key, ms in med.items()}
    out = {"adapter": dev.name, "ms": med, "tflops": tflops, "all": got}
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
