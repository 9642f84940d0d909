"""Where LAMB's and MARS's steps go, pass by pass (issue 25: their pure 16-bit rows at 0.55-0.80 of copy where fp32
and bfloat16 + master reach 0.92-0.99): timing-only subclasses that run only the first k of the class's passes
(results wrong on purpose for k < all; nothing in the package reaches them), k = 1 .. all, without the clip, and the
step as ``kernel_variants.py`` times it (LAMB with its default ``clip_grad_norm=1.0``: a flat grad-norm pass and
its total before the moments), all timed in alternating rounds on GPT-2 124M. A pass's cost is its prefix's time
minus the one before; ``clip`` (rows that clip) is the benched step's time minus the whole unclipped one. Each pass is printed
against its own bytes at the copy rate of the same run (:func:`pass_bytes`: what the pass must move).

    python benchmarks/reducing_passes.py [--optimizers lamb,mars] [--precisions fp32,bf16,f16] [--rounds 3]
        [--variant F16ROUND=1,WIDE=0] [--budget-s 60] [--json out.json]

(``--variant``: class switches set on every build, e.g. the one under test; ``--set gpt2:LAYERS,WIDTH``: GPT-2's
shapes with fewer layers or a smaller width, for a CPU adapter.)
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import rlx_gpu
from rlx_gpu.runtime.device import get_device
from rlx_gpu.tools.bench.rows import grads as make_grads
from rlx_gpu.tools.bench.rows import start_params as make_params
from rlx_gpu.tools.bench.shapes import ITEMSIZE, OPTIMIZERS, PRECISIONS, gpt2_shapes, param_set
from rlx_gpu.tools.bench.timing import Timer, copy_bandwidth, median, steps_for

BENCHED = "step as benched"


def prefix_class(base: type, k: int, switches: dict | None = None) -> type:
    """``base`` (with the class attributes ``switches``) running only the first ``k`` of its passes (timing
    only)."""
    attrs = dict(switches or {}, passes=tuple(base.passes[:k]))
    return type(base.__name__, (base,), attrs)


def pass_bytes(p, precision: str, shapes) -> int:
    """The bytes one pass must move on ``shapes``: its param loads and stores (the float32 master copy where the
    row keeps one, and the 16-bit param stored too), its grad reads, its state reads and writes; over the tensors
    its ``only_if`` flag covers (``matrix``: the 2-D ones). A per-tensor pass (a few bytes a block): 0."""
    if p.kind != "elementwise":
        return 0
    pd, gd, sd, master = PRECISIONS[precision]
    ps, gs, ss = ITEMSIZE[pd], ITEMSIZE[gd], ITEMSIZE[sd]
    src = 4 if master and ps == 2 else ps  # (where the update starts from)
    per = {"": 0, "r": src, "rw": 2 * src + (ps if src != ps else 0)}[p.param]
    per += (gs if p.grad else 0) + ss * (len(p.reads) + len(p.writes))
    counted = [s for _, s in shapes if p.only_if != "matrix" or len(s) == 2]
    return per * int(sum(int(np.prod(s)) for s in counted))


def clipped(opt: str) -> bool:
    """Whether the row's step as benched clips the grads (LAMB: its default ``clip_grad_norm=1.0``)."""
    cls_name, kw, _, _ = OPTIMIZERS[opt]
    spec = getattr(rlx_gpu, cls_name).spec
    return kw.get("clip_grad_norm", spec.option_defaults.get("clip_grad_norm")) is not None


def _built(dev, opt: str, precision: str, shapes, switches: dict) -> dict:
    """Every prefix (clip off) and the benched step of one row, built, grads written, warmed up: {name: (optimizer,
    steps per timed run)}."""
    cls_name, kw, _, _ = OPTIMIZERS[opt]
    base = getattr(rlx_gpu, cls_name)
    pd, gd, sd, master = PRECISIONS[precision]
    params, grads = make_params(opt, precision, shapes), make_grads(opt, precision, shapes)
    opts = dict(lr=1e-3, state_dtype=sd, master_weights=master, grad_dtype=None if gd == pd else gd, device=dev)
    builds = {p.entry: prefix_class(base, k + 1, switches)(params, **kw, **opts, clip_grad_norm=None)
              for k, p in enumerate(base.passes)}
    if clipped(opt):
        builds[BENCHED] = prefix_class(base, len(base.passes), switches)(params, **kw, **opts)
    out = {}
    for name, o in builds.items():
        for n, v in grads.items():
            o.grads[n].write(v)
        for _ in range(3):
            o.step()
        dev.sync()
        out[name] = o
    return out


def time_row(dev, timer, opt: str, precision: str, shapes, rounds: int, repeats: int, switches: dict) -> dict:
    """{name: median seconds a step} of one row's prefixes and benched step, timed in alternating rounds after one
    untimed round (the first build timed ran slow in entry 62's run)."""
    built = _built(dev, opt, precision, shapes, switches)
    n = {name: steps_for(timer.measure(o.step, 2, 1)[0]) for name, o in built.items()}
    got = {name: [] for name in built}
    for r in range(rounds + 1):
        for name, o in built.items():
            t = timer.measure(o.step, n[name], repeats if r else 1)[0]
            got[name] += [t] if r else []
    return {name: median(ts) for name, ts in got.items()}


def report(opt: str, precision: str, res: dict, shapes, copy: float) -> dict:
    """One row's passes (each: prefix ms, pass ms, its bytes' ms at the copy rate, that over the pass's time) and
    the clip, printed; returned for the JSON."""
    base = getattr(rlx_gpu, OPTIMIZERS[opt][0])
    gs = ITEMSIZE[PRECISIONS[precision][1]]
    rows, before = {}, 0.0
    for p in base.passes:
        t = res[p.entry]
        rows[p.entry] = (t, t - before, pass_bytes(p, precision, shapes))
        before = t
    if BENCHED in res:
        rows["clip"] = (res[BENCHED], res[BENCHED] - before, gs * sum(int(np.prod(s)) for _, s in shapes))
    whole = res.get(BENCHED, before)
    print(f"\n{opt} {precision}: step as benched {whole * 1e3:.3f} ms, passes alone {before * 1e3:.3f} ms")
    out = {}
    for name, (t, dt, nbytes) in rows.items():
        at = nbytes / copy / 1e9
        out[name] = {"prefix_ms": t * 1e3, "pass_ms": dt * 1e3, "bytes": nbytes, "at_copy_ms": at * 1e3,
                     "of_copy": at / dt if nbytes and dt > 0 else None}
        frac = f"{at / dt:6.3f}" if nbytes and dt > 0 else "     -"
        print(f"  {name:12s} prefix {t * 1e3:7.3f} ms  pass {dt * 1e3:7.3f} ms  bytes {nbytes / 1e6:8.1f} MB  "
              f"at copy {at * 1e3:7.3f} ms  of copy {frac}")
    return out


def _switches(text: str) -> dict:
    """``NAME=0|1,...`` -> {NAME: bool}."""
    out = {}
    for item in filter(None, text.split(",")):
        k, _, v = item.partition("=")
        if v not in ("0", "1"):
            raise SystemExit(f"--variant: {item!r}: expected NAME=0 or NAME=1")
        out[k.strip().upper()] = v == "1"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="gpt2-124m")
    ap.add_argument("--optimizers", default="lamb,mars")
    ap.add_argument("--precisions", default="fp32,bf16,f16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variant", default="", help="class switches on every build, e.g. F16ROUND=1")
    ap.add_argument("--budget-s", type=float, default=1e9, help="rows not started past this many seconds are left out")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    switches = _switches(args.variant)
    dev = get_device()
    shapes = gpt2_shapes(*map(int, args.set[5:].split(","))) if args.set.startswith("gpt2:") else param_set(args.set)
    timer, t0 = Timer(dev), time.perf_counter()
    copy = copy_bandwidth(dev, timer, 1 << 28, args.repeats)["wgsl_copy_wg256_ept4"]
    out = {"adapter": dev.name, "set": args.set, "copy_gbps": copy, "switches": switches, "rows": {}, "left_out": []}
    print(f"adapter {dev.name}; copy {copy:.0f} GB/s; switches {switches or 'the defaults'}")
    for opt in args.optimizers.split(","):
        for precision in args.precisions.split(","):
            if time.perf_counter() - t0 > args.budget_s:
                out["left_out"].append(f"{opt} {precision}")
                continue
            try:
                res = time_row(dev, timer, opt, precision, shapes, args.rounds, args.repeats, switches)
            except Exception as e:  # (printed; the next row goes on)
                print(f"{opt} {precision}: FAILED {type(e).__name__}: {str(e)[:500]}", file=sys.stderr)
                continue
            out["rows"][f"{opt} {precision}"] = report(opt, precision, res, shapes, copy)
            _write(args.json, out)  # (after every row: a run cut short keeps the rows it finished)
    if out["left_out"]:
        print(f"left out (past --budget-s): {', '.join(out['left_out'])}")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    _write(args.json, out)
    return 0


def _write(path: str | None, out: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
