"""Quantization-aware training on the device (issue 28): AdamW's step on GPT-2 124M without and with the ``qat=``
export of every matrix, side by side: per output channel *fused* (the update pass's workgroups see whole rows and
write scales and codes themselves; int8 and int4) and the same through the *second pass* (``QAT_FUSE`` off: the
update pass notes amax, then a scales pass and a pass over the updated weights write the codes), and per tensor
(always the second pass: a whole matrix's amax spans workgroups); and the standalone fake-quant kernels' rate
against the device copy kernel (bytes read + written per second). Every variant's copy of one small and one large
matrix is checked against quantizing the updated weights. GPU timestamps, medians over rounds that alternate the
figures. One command, a few minutes on the H200:

    python benchmarks/qat_bench.py [--set gpt2-124m] [--elems 67108864] [--rounds 3] [--json out.json]

(``--set gpt2:LAYERS,WIDTH``: GPT-2's shapes with fewer layers or a smaller width, for a CPU adapter.)
"""
import argparse

import numpy as np

import rlx_gpu
from rlx_gpu.addons.qat.kernels import E5M2, PER_CHANNEL, SATURATE, QParams, args_words, dispatch, groups, operand
from rlx_gpu.tools.bench.shapes import gpt2_shapes, param_set
from rlx_gpu.tools.bench.timing import Timer, alternating, copy_bandwidth, report


SECOND = type("AdamW", (rlx_gpu.AdamW,), {"QAT_FUSE": False})  # (every copy through the second pass)


def adamw(dev, shapes, spec, cls=rlx_gpu.AdamW):
    rng = np.random.default_rng(0)
    params = {n: (rng.standard_normal(s) * 0.02).astype(np.float32) for n, s in shapes}
    opt = cls(params, lr=1e-4, qat=spec, device=dev)
    for n, s in shapes:
        opt.grads[n].write((rng.standard_normal(s) * 1e-3).astype(np.float32))
    for _ in range(20):
        opt.step()
    return opt


def matches(opt, name) -> bool:
    """Whether the exported copy of ``name`` is quantizing its updated weights (codes and scales, bit for bit)."""
    from rlx_gpu.reference.qat import export_copy
    q = opt.qat[name]
    codes, scale = export_copy(opt.params[name].numpy(), q.spec.bits, "channel" if q.spec.per_channel else "tensor")
    return bool((q.codes() == codes).all() and (q.scale().view(np.uint32) == scale.view(np.uint32)).all())


def fq_kernel(dev, n, entry, flags, channels=1):
    """A function recording one dispatch of a standalone fake-quant kernel over n float32 elements."""
    x = operand("bench", "x", np.random.default_rng(1).standard_normal(n).astype(np.float32), dev)
    y = dev.buffer(4 * n, "bench.y")
    qp = QParams.upload(dev, np.full(channels, 0.02, np.float32), np.zeros(channels, np.int64))
    args = dev.buffer(64, "bench.args", data=args_words(n, channels, n // channels, flags, -128, 127))

    def run():
        enc = dev.encoder()
        dispatch(enc, dev, entry, groups(n), args=args, qp=qp.buffer, xin=x.res(), yout=y)
        dev.submit(enc)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="gpt2-124m")
    ap.add_argument("--elems", type=int, default=1 << 26, help="elements of the standalone kernels' tensor")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = rlx_gpu.get_device()
    timer = Timer(dev)
    shapes = gpt2_shapes(*map(int, args.set[5:].split(","))) if args.set.startswith("gpt2:") else param_set(args.set)
    mats = [n for n, s in shapes if len(s) == 2] or [n for n, _ in shapes]
    opts = {"adamw": adamw(dev, shapes, None),
            "adamw+int8_channel_fused": adamw(dev, shapes, {n: "int8/channel" for n in mats}),
            "adamw+int8_channel_second_pass": adamw(dev, shapes, {n: "int8/channel" for n in mats}, SECOND),
            "adamw+int4_channel_fused": adamw(dev, shapes, {n: "int4/channel" for n in mats}),
            "adamw+int8_tensor_second_pass": adamw(dev, shapes, {n: "int8" for n in mats})}
    fused = {k: sum(c.fused for c in o.qat.values()) for k, o in opts.items() if k != "adamw"}
    # the exported copies are what quantizing the updated weights gives (the smallest and the largest matrix)
    sizes = {n: int(np.prod(dict(shapes)[n])) for n in mats}
    checked = (min(mats, key=sizes.get), max(mats, key=sizes.get))
    exact = {k: all(matches(o, n) for n in checked) for k, o in opts.items() if k != "adamw"}
    figures = {k: (lambda opt=opt: timer.calibrated(opt.step, args.repeats, probe=2)[0] * 1e3)
               for k, opt in opts.items()}
    n = args.elems // 4 * 4
    kernels = {"fq_per_tensor": fq_kernel(dev, n, "fq_affine", 0),
               "fq_per_channel": fq_kernel(dev, n, "fq_affine", PER_CHANNEL, 4096),
               "fq_fp8_e4m3fn": fq_kernel(dev, n, "fq_fp8", SATURATE),
               "fq_fp8_e5m2": fq_kernel(dev, n, "fq_fp8", E5M2 | SATURATE)}
    for k, f in kernels.items():
        f()
        figures[k + "_GBps"] = lambda f=f: 8 * n / timer.calibrated(f, args.repeats)[0] / 1e9
    figures["copy_GBps"] = lambda: copy_bandwidth(dev, timer, 4 * n, args.repeats)["wgsl_copy_wg256_ept4"]
    med, every = alternating(figures, args.rounds)
    base = med["adamw"]
    out = {"adapter": dev.name, "set": args.set, "matrices": len(mats), "elems": n, "copy_matches_twin": exact,
           "fused_copies": fused, "figures": med, "all": every,
           "export_overhead": {k: med[k] / base - 1 for k in opts if k != "adamw"},
           "fq_fraction_of_copy": {k: med[k + "_GBps"] / med["copy_GBps"] for k in kernels}}
    report(out, args.json)
    for k, v in out["export_overhead"].items():
        target = "<= +10%, fused" if fused[k] == len(mats) else "<= +25%, with a second pass"
        print(f"{k}: {med[k]:.3f} ms vs {base:.3f} ms: +{100 * v:.1f}% (target {target}; {fused[k]} of {len(mats)} "
              f"copies fused; copies equal the twin's: {exact[k]})")
    for k, v in out["fq_fraction_of_copy"].items():
        print(f"{k}: {med[k + '_GBps']:.0f} GB/s = {v:.2f} of the copy kernel's {med['copy_GBps']:.0f} (target >= 0.85)")


if __name__ == "__main__":
    main()
