"""SparseAdam on an embedding table against the dense AdamW step on the same table, in one run (issue: 8-bit and
sparse state). GPU timestamps: the kernel alone (20 dispatches in one command buffer), and step() of a grad already
on the device (upload_sparse) on the GPU timeline (which includes the host's per-step submission when that is
slower than the kernel); the host path (coalescing and uploading a RowSparse each step) as wall clock; torch.optim.SparseAdam and fused AdamW on CUDA beside them where torch has CUDA.

    python benchmarks/sparse_bench.py [--rows 50257] [--dim 768] [--touched 1024,4096,16384] [--json out.json]
"""
import argparse
import json
import time

import numpy as np

import rlx_gpu
from rlx_gpu.tools.cli import describe
from rlx_gpu.tools.bench.baselines import cuda_ms, torch_cuda
from rlx_gpu.tools.bench.timing import Timer, median


def main():
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--rows", type=int, default=50257)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--touched", default="1024,4096,16384")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds over every figure (medians)")
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = rlx_gpu.get_device()
    timer = Timer(dev)
    torch = torch_cuda()
    shape = (args.rows, args.dim)
    table = np.full(shape, 0.01, np.float32)
    dense = rlx_gpu.AdamW({"emb": table}, device=dev)
    dense.grads["emb"].write(np.full(shape, 1e-3, np.float32))
    for _ in range(200):  # (clocks up before anything is timed)
        dense.step()
    figures = {"dense_adamw_ms": lambda: timer.calibrated(dense.step, args.repeats, probe=2)[0] * 1e3}
    if torch is not None:
        tp = torch.nn.Parameter(torch.full(shape, 0.01, device="cuda"))
        tp.grad = torch.full_like(tp, 1e-3)
        to = torch.optim.AdamW([tp], fused=True)
        figures["torch_fused_adamw_ms"] = lambda: cuda_ms(torch, to.step, args.repeats)
    rng = np.random.default_rng(0)
    keep = []
    for k in (int(x) for x in args.touched.split(",")):
        idx = rng.choice(args.rows, k, replace=False).astype(np.int64)
        vals = rng.standard_normal((k, args.dim)).astype(np.float32) * np.float32(1e-3)
        rs = rlx_gpu.RowSparse(idx, vals)
        opt = rlx_gpu.SparseAdam({"emb": table}, device=dev)
        up = opt.upload_sparse({"emb": rs})
        opt.step(up)
        keep.append(opt)

        def twenty(opt=opt, g=up["emb"]):  # the kernel alone: 20 dispatches of one step in one command buffer
            enc = dev.device.create_command_encoder()
            for _ in range(20):
                opt._encode_sparse(enc, g)
            dev.submit(enc)

        def host(opt=opt, rs=rs):
            walls = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                opt.step({"emb": rs})
                dev.sync()
                walls.append((time.perf_counter() - t0) * 1e3)
            return median(walls)
        figures[f"{k}:kernel_ms"] = lambda f=twenty: timer.calibrated(f, args.repeats, probe=2)[0] * 1e3 / 20
        figures[f"{k}:step_ms"] = lambda opt=opt, up=up: timer.calibrated(lambda: opt.step(up), args.repeats,
                                                                           probe=2)[0] * 1e3
        figures[f"{k}:host_path_wall_ms"] = host
        if torch is not None:
            p = torch.nn.Parameter(torch.full(shape, 0.01, device="cuda"))
            g = torch.sparse_coo_tensor(torch.tensor(idx, device="cuda")[None], torch.tensor(vals, device="cuda"),
                                        shape)
            o = torch.optim.SparseAdam([p])

            def tstep(p=p, g=g, o=o):
                p.grad = g
                o.step()
            figures[f"{k}:torch_sparse_adam_ms"] = lambda f=tstep: cuda_ms(torch, f, args.repeats)
    got = {name: [] for name in figures}
    for _ in range(args.rounds):
        for name, fn in figures.items():
            got[name].append(fn())
    med = {name: median(v) for name, v in got.items()}
    out = {"adapter": dev.name, "shape": shape, "rounds": args.rounds, "figures": med, "all": got, "rows": []}
    for k in (int(x) for x in args.touched.split(",")):
        row = {"touched": k, **{n.split(":")[1]: v for n, v in med.items() if n.startswith(f"{k}:")}}
        row["kernel_vs_dense"] = med["dense_adamw_ms"] / row["kernel_ms"]
        out["rows"].append(row)
        print(f"{k:6d} rows: kernel {row['kernel_ms']:.4f} ms ({row['kernel_vs_dense']:.1f}x faster than dense AdamW "
              f"{med['dense_adamw_ms']:.3f} ms), step(uploaded) {row['step_ms']:.4f} ms GPU timeline, host path "
              f"{row['host_path_wall_ms']:.2f} ms wall"
              + (f", torch SparseAdam {row['torch_sparse_adam_ms']:.3f} ms" if "torch_sparse_adam_ms" in row else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
