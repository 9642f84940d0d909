"""Quantization-aware training on the device (issue 28): AdamW's step on GPT-2 124M without and with the ``qat=``
export of every matrix, each export path in its first version and its faster variants side by side, and the
standalone fake-quant kernels (first and vectorised entries) against the device copy kernel.

Export rows (``<export>[<variant>]``): per output channel *fused* (the update pass's workgroups see whole rows and
write scales and codes themselves; int8 and int4) and the same through the *second pass* (``QAT_FUSE`` off: the
update pass notes amax, then a scales pass and a pass over the updated weights write the codes), and per tensor
(always the second pass). Variants (the optimizer class switches, engine/qat.py): ``first`` = ``QAT_KEEP=0,
QAT_ENCODE="atomic"`` (the export read back after a storage barrier; the second pass's scales by two atomic loads
per vec4), ``cached`` = ``QAT_KEEP=0, QAT_ENCODE="cached"`` (second pass only: a block's scales read once into
workgroup memory), ``new`` = ``QAT_KEEP=4, QAT_ENCODE="cached"`` (also: each update thread keeps its stored vec4s
and quantizes them itself), ``keep3`` (int8 fused only: three vec4s kept, all GPT-2's runs need; fewer
registers). ``<row>:encode_only`` times the second pass's dispatches alone (after the checks; the
step minus it is the update pass with its amax notes). Every variant's copy of one small and one large matrix is
checked against quantizing the updated weights before timing. Kernel rows: ``fq_*[first]`` the first entries
(``fq_affine``, ``fq_fp8``), ``fq_*[vec]`` the vectorised ones (``kernels.FAST``), in GB/s read + written. GPU
timestamps, medians over rounds that alternate every figure; a variant that fails prints its error and the others
go on. One command, ~2 minutes on the H200:

    python benchmarks/qat_bench.py [--set gpt2-124m] [--elems 67108864] [--rounds 3] [--json out.json]

``--diagnose``: only the default variant (``new``) of the int8/channel rows and the first kernel entries, beside
``qatdiag.py``'s timing-only rewrites of them (results wrong on purpose; rows ``...{diag}``), in ~2 minutes:
``timeout 120 python benchmarks/qat_bench.py --diagnose --repeats 3``.

(``--set gpt2:LAYERS,WIDTH``: GPT-2's shapes with fewer layers or a smaller width, for a CPU adapter.)
"""
import argparse
import time
import traceback

import numpy as np

import qatdiag  # (benchmarks/: the script's folder)
import rlx_gpu
from rlx_gpu.addons.qat.kernels import E5M2, PER_CHANNEL, SATURATE, QParams, args_words, dispatch, groups, operand
from rlx_gpu.tools.bench.shapes import gpt2_shapes, param_set
from rlx_gpu.tools.bench.timing import Timer, alternating, copy_bandwidth, report

VARIANTS = {"first": {"QAT_KEEP": 0, "QAT_ENCODE": "atomic"}, "cached": {"QAT_KEEP": 0, "QAT_ENCODE": "cached"},
            "new": {"QAT_KEEP": 4, "QAT_ENCODE": "cached"}, "keep3": {"QAT_KEEP": 3, "QAT_ENCODE": "cached"}}
# export -> (spec of every matrix, whether fused, the variants timed)
EXPORTS = {"int8_channel_fused": ("int8/channel", True, ("first", "new", "keep3")),
           "int4_channel_fused": ("int4/channel", True, ("first", "new")),
           "int8_channel_second_pass": ("int8/channel", False, ("first", "cached", "new")),
           "int8_tensor_second_pass": ("int8", False, ("first", "cached", "new"))}
TARGET = {True: 0.10, False: 0.25}
T0 = time.perf_counter()


def adamw(dev, data, spec, switches=None, fuse=True, diag=None):
    params, grads = data
    cls = type("AdamW", (rlx_gpu.AdamW,), {**(switches or {}), "QAT_FUSE": fuse})
    cls = qatdiag.diagnostic_class(cls, diag) if diag else cls
    opt = cls(params, lr=1e-4, qat=spec, device=dev)
    for n, g in grads.items():
        opt.grads[n].write(g)
    for _ in range(20):
        opt.step()
    return opt


def matches(opt, name) -> bool:
    """Whether the exported copy of ``name`` is quantizing its updated weights (codes and scales, bit for bit)."""
    from rlx_gpu.reference.qat import export_copy
    q = opt.qat[name]
    codes, scale = export_copy(opt.params[name].numpy(), q.spec.bits, "channel" if q.spec.per_channel else "tensor")
    return bool((q.codes() == codes).all() and (q.scale().view(np.uint32) == scale.view(np.uint32)).all())


def encode_only(dev, opt):
    """A function recording the second pass's dispatches alone (scales and codes from the amax of the last step)."""
    plan = opt._qat_plan()

    def run():
        enc = dev.encoder()
        for k, bind, n in plan:
            k.dispatch(enc, bind, n)
        dev.submit(enc)
    return run


def fq_kernel(dev, xy, entry, flags, channels=1, diag=None):
    """A function recording one dispatch of a standalone fake-quant kernel from ``xy[0]`` (an Operand of n float32
    elements) into ``xy[1]``."""
    x, y = xy
    n = x.n
    qp = QParams.upload(dev, np.full(channels, 0.02, np.float32), np.zeros(channels, np.int64))
    args = dev.buffer(64, "bench.args", data=args_words(n, channels, n // channels, flags, -128, 127))
    kernel = qatdiag.fq_kernel(dev, diag, entry) if diag else None

    def run():
        enc = dev.encoder()
        dispatch(enc, dev, entry, groups(n), kernel, args=args, qp=qp.buffer, xin=x.res(), yout=y)
        dev.submit(enc)
    return run


def attempt(errors, name, fn):
    """fn() or, where it raises, None with its error printed and kept under ``name``."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (a variant that fails to compile or run: the others go on)
        errors[name] = f"{type(e).__name__}: {e}"
        print(f"{name}: FAILED: {errors[name]}\n{traceback.format_exc(limit=3)}", flush=True)
        return None


DIAG_ROWS = {"int8_channel_second_pass": ("enc-nostore", "enc-fixscale", "enc-constentry", "upd-noamax"),
             "int8_channel_fused": ("upd-noamax",)}


def build(dev, shapes, errors, diagnose=False):
    """The optimizers by row name, each exported copy's check, and how many copies each fuses."""
    rng = np.random.default_rng(0)
    params = {n: (rng.standard_normal(s) * 0.02).astype(np.float32) for n, s in shapes}
    data = (params, {n: (rng.standard_normal(s) * 1e-3).astype(np.float32) for n, s in shapes})
    mats = [n for n, s in shapes if len(s) == 2] or [n for n, _ in shapes]
    sizes = {n: int(np.prod(dict(shapes)[n])) for n in mats}
    checked = (min(mats, key=sizes.get), max(mats, key=sizes.get))
    opts, exact, fused = {"adamw": adamw(dev, data, None)}, {}, {}
    for ex, (spec, fuse, variants) in EXPORTS.items():
        rows = [(v, None) for v in variants] if not diagnose else \
            [("new", d) for d in (None, *DIAG_ROWS.get(ex, ()))] if ex in DIAG_ROWS else []
        for v, d in rows:
            row = f"{ex}[{v}]" + (f"{{{d}}}" if d else "")
            opt = attempt(errors, row, lambda spec=spec, v=v, fuse=fuse, d=d: adamw(
                dev, data, {n: spec for n in mats}, VARIANTS[v], fuse, d))
            if opt is not None:
                opts[row] = opt
                fused[row] = sum(c.fused for c in opt.qat.values())
                exact[row] = "diag" if d else attempt(errors, row + ":check",
                                                      lambda o=opt: all(matches(o, n) for n in checked))
                print(f"built {row} at {time.perf_counter() - T0:.0f} s: copies equal the twin's: {exact[row]}",
                      flush=True)
    return opts, exact, fused, len(mats)


def kernels(dev, n, errors, diagnose=False) -> dict:
    rows = {"fq_per_tensor": ("fq_affine", 0, 1), "fq_per_channel": ("fq_affine", PER_CHANNEL, 4096),
            "fq_fp8_e4m3fn": ("fq_fp8", SATURATE, 1), "fq_fp8_e5m2": ("fq_fp8", E5M2 | SATURATE, 1)}
    out = {}
    xy = (operand("bench", "x", np.random.default_rng(1).standard_normal(n).astype(np.float32), dev),
          dev.buffer(4 * n, "bench.y"))
    for k, (entry, flags, ch) in rows.items():
        variants = [("first", entry, None)] + ([("first", entry, d) for d in qatdiag.FQ_DIAGNOSTICS
                                                if entry == "fq_affine" or not d.startswith("chan")] if diagnose
                                               else [("vec", entry + "_v", None)])
        for v, e, d in variants:
            row = f"{k}[{v}]" + (f"{{{d}}}" if d else "")
            f = attempt(errors, row, lambda e=e, flags=flags, ch=ch, d=d: fq_kernel(dev, xy, e, flags, ch, d))
            if f is not None:
                attempt(errors, row, f)  # (compiled and run once)
                if row not in errors:
                    out[row] = f
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="gpt2-124m")
    ap.add_argument("--elems", type=int, default=1 << 26, help="elements of the standalone kernels' tensor")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--diagnose", action="store_true", help="the default rows beside qatdiag.py's timing-only rewrites")
    args = ap.parse_args()
    dev = rlx_gpu.get_device()
    timer = Timer(dev)
    shapes = gpt2_shapes(*map(int, args.set[5:].split(","))) if args.set.startswith("gpt2:") else param_set(args.set)
    errors = {}
    opts, exact, fused, nmats = build(dev, shapes, errors, args.diagnose)
    figures = {k: (lambda opt=opt: timer.calibrated(opt.step, args.repeats, probe=2)[0] * 1e3)
               for k, opt in opts.items()}
    for k, opt in opts.items():
        if "second_pass" in k:
            f = encode_only(dev, opt)
            figures[k + ":encode_only"] = lambda f=f: timer.calibrated(f, args.repeats, probe=2)[0] * 1e3
    n = args.elems // 4 * 4
    for k, f in kernels(dev, n, errors, args.diagnose).items():
        figures[k + "_GBps"] = lambda f=f: 8 * n / timer.calibrated(f, args.repeats)[0] / 1e9
    figures["copy_GBps"] = lambda: copy_bandwidth(dev, timer, 4 * n, args.repeats)["wgsl_copy_wg256_ept4"]
    safe = {k: (lambda f=f, k=k: attempt(errors, k + ":timing", f) or float("nan")) for k, f in figures.items()}
    print(f"timing {len(safe)} figures from {time.perf_counter() - T0:.0f} s", flush=True)
    med, every = alternating(safe, args.rounds)
    base = med["adamw"]
    steps = [k for k in opts if k != "adamw"]
    out = {"adapter": dev.name, "set": args.set, "matrices": nmats, "elems": n, "variants": VARIANTS,
           "copy_matches_twin": exact, "fused_copies": fused, "errors": errors, "figures": med, "all": every,
           "export_overhead": {k: med[k] / base - 1 for k in steps},
           "fq_fraction_of_copy": {k[:-5]: med[k] / med["copy_GBps"] for k in med if k.startswith("fq_")}}
    report(out, args.json)
    print(f"\n{'row':40s} {'ms':>7s} {'vs adamw':>9s} {'target':>7s} {'encode':>7s} fused  exact")
    print(f"{'adamw':40s} {base:7.3f}")
    for k in steps:
        fuse = EXPORTS[k.split("[")[0]][1]
        enc = med.get(k + ":encode_only", float("nan"))
        print(f"{k:40s} {med[k]:7.3f} {100 * out['export_overhead'][k]:+8.1f}% {'<=+' + str(int(100 * TARGET[fuse])) + '%':>7s}"
              f" {enc:7.3f} {fused[k]:2d}/{nmats} {exact[k]}")
    print(f"\n{'kernel':32s} {'GB/s':>6s} {'of copy':>8s} (target >= 0.85; copy {med['copy_GBps']:.0f} GB/s)")
    for k, v in out["fq_fraction_of_copy"].items():
        print(f"{k:32s} {med[k + '_GBps']:6.0f} {v:8.2f}")
    if errors:
        print("\nerrors:", *(f"  {k}: {v}" for k, v in errors.items()), sep="\n")


if __name__ == "__main__":
    main()
