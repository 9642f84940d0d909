"""The drivers' variants (``Optimizer.WIDE``, ``FULL``, ``SUBGROUPS``, ``VPACK``: engine/drivers.py) timed side by
side on GPT-2 124M in one run, with the copy rate of the same run, torch's fused/foreach step and bitsandbytes'
AdamW8bit where they import: what issue 25's targets are judged on.

    python benchmarks/kernel_variants.py --json $OUT/kernel_variants.json
    python benchmarks/kernel_variants.py --optimizers adamw,adamw8bit --precisions fp32 --variants default,+qclosed

Per (optimizer, precision) every variant's optimizer is built first, then timed in alternating rounds (so drift hits
every variant alike). Variants: ``off`` (every switch off: the drivers before issue 25), ``default`` (the class's
switches), and ``-wide``, ``-full``, ``-subgroups``, ``-vpack`` (the default with one switch off) where the switch
applies to the row (WIDE: 16-bit buckets; VPACK: bfloat16 stores; SUBGROUPS: reductions and quantized block
maxima; FULL: unquantized drivers); ``+qdirect`` (quantized rows: the default with QDIRECT on, the maps read from
the state buffers instead of copied into workgroup memory); ``+qclosed`` (quantized rows: the code search in
closed form, engine/qsearch.py), ``qclosed-ept4`` (that with four vec4s a thread: EPT = 4, every bucket) and
``qclosed-qept4`` (that with QEPT = 4: the quantized buckets' kernels alone take four vec4s a thread, in workgroups
of half the threads, the engine block kept); ``+qlog``, ``+qcalc`` (quantized rows: the default with 8-bit's
closed form QFORM8 ``"log"``, the decade by log2, or ``"calc"``, that and the midpoint computed: engine/qsearch.py),
``+qlin4`` (QFORM4 ``"linear"``: the 4-bit unsigned map's code by one comparison), ``+qmin`` (QFORM8 ``"min"``: the
least of the seven lines, no decade), ``+qbin`` (QFORM8 ``"binade"``: of two lines from a table by the exponent),
``+qvlog`` (QFORM8 ``"vlog"``: log for four values at once, one branch for the four, 2^d by bits), ``+qvlogi``
(QFORM8 ``"vlogi"``: vlog with its floor and float-to-int conversion done by the adder and integer operations),
``+qlin4i`` (QFORM4 ``"lineari"``: the same for 4-bit's unsigned linear form),
``+qfull``/``-qfull`` (quantized rows: QFULL, their subgroup driver's blocks wholly inside their tensor by a copy of
the unit without tail masks, or not), ``+qhoist``/``-qhoist`` (QHOIST: that driver reads a tensor's record once
per run of its blocks and the grads' multiplier once, not every round), ``+qredux``/``-qredux`` (QREDUX: its block
maxima by subgroupMax/subgroupAny where a subgroup lies within one block), ``+qbtab``/``-qbtab`` (QBTAB: its
workgroup's block-table rows read once into workgroup memory, not by every round), ``+qdecade``, ``+qbisect``
and ``-qclosed`` (the forms and the guide search the defaults replaced; a variant whose switches are the default's
is timed once, under the first name); ``+f16round`` (LAMB's float16 rows: F16ROUND on, the moments as
the apply pass re-reads them rounded by the hardware's conversion, engine/codegen.py); ``-hvec`` (LAMB's float16
rows: unpack4_f16 by four scalar h2f calls again, as before it took vector operations: the same bits);
``-merge``, ``-rowcols`` (Adafactor: its stats pass apart from update_norm again; its rows and cols passes in two dispatches again),
``finish1``, ``finish8`` (Adafactor.FINISH: the finish pass loads 1 or 8 column partials at once, the default 16;
``+recip``: Adafactor.RECIP, direction()'s row by a float32 reciprocal; ``+ptloads`` (the reducing rows):
Optimizer.PTLOADS, the per-tensor passes load 8 partials at once;
``+wide``/``-wide`` its 16-bit rows with WIDE the other way from the default); ``ept4`` (the default with four
vec4s a thread instead of two: AdamW's 16-bit rows and the quantized ones); and the quantized rows' timing-only
diagnostics ``x-search``, ``x-decode``, ``x-maps``, ``x-bmax``, ``x-floor`` (results wrong on purpose:
``qdiag.py``). A row that fails to build or step prints its error and the others go on; rows past ``--budget-s``
are left out (named at the end).
Bytes per step: ``rlx-gpu bench``'s ``min_bytes``.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback

import rlx_gpu
from rlx_gpu.engine import Optimizer
from rlx_gpu.engine.drivers import SWITCHES
from rlx_gpu.runtime.device import get_device
from rlx_gpu.tools.bench.baselines import torch_cuda, torch_step_ms
from rlx_gpu.tools.bench.rows import start_params as make_params
from rlx_gpu.tools.bench.rows import grads as make_grads
from rlx_gpu.tools.bench.shapes import EXTRA_BASELINES, OPTIMIZERS, PRECISIONS, min_bytes, param_set
from rlx_gpu.tools.bench.timing import Timer, copy_bandwidth, median, steps_for

from qdiag import DIAGNOSTICS, diagnostic_class, rewritten_class  # (benchmarks/: the script's folder)

ELEMENTWISE = ("adamw", "adam", "sgd", "rmsprop", "adagrad", "nadamw", "radam", "qhadamw", "lion", "sophiah")
REDUCING = ("lamb", "mars", "adafactor")
QUANTIZED = ("adamw8bit", "adamw4bit")
# variant: (width, its QFORM) (the first two: the forms before the H200 chose "log" and "linear")
QFORMS = {"+qdecade": (8, "decade"), "+qbisect": (4, "bisect"), "+qlog": (8, "log"), "+qcalc": (8, "calc"),
          "+qlin4": (4, "linear"), "+qmin": (8, "min"), "+qbin": (8, "binade"), "+qvlog": (8, "vlog"),
          "+qvlogi": (8, "vlogi"), "+qlin4i": (4, "lineari")}


def variants(opt: str, precision: str) -> list:
    """The variant names timed for one row (``off`` first, ``default`` second)."""
    out = ["off", "default"]
    low = precision != "fp32"
    if opt in QUANTIZED:
        forms = [v for v, (b, _) in QFORMS.items() if b == (8 if opt == "adamw8bit" else 4)]
        return out + ["+qfull", "-qfull", "+qhoist", "-qhoist", "+qredux", "-qredux", "+qbtab", "-qbtab", "+qdirect",
                      "ept4", "-qclosed", "+qclosed", "qclosed-ept4", "qclosed-qept4", *forms, *DIAGNOSTICS]
    if low and opt in ("adamw", "sgd", "lion", "lamb", "mars"):
        out += ["-wide", "-full"] + (["-vpack"] if precision.startswith("bf16") else []) + (["ept4"] if opt == "adamw"
                                                                                          else [])
    if opt in REDUCING:
        out += ["-subgroups", "+ptloads", "-ptloads"]
    if opt == "lamb" and precision == "f16":  # (round_state by the hardware's float16 conversion)
        out += ["+f16round", "-f16round", "-hvec"]
    if opt == "adafactor":  # (WIDE: on in bfloat16, off in float16 by default: timed against the other way)
        out += ["-merge", "-rowcols", "finish1", "finish8", "+recip", "-recip"]
        out += ["+wide"] if precision == "f16" else ["-wide"] if low else []
    return list(dict.fromkeys(out))


EXTRA = ("QFORM8", "QFORM4", "EPT", "QEPT", "FINISH", "RECIP")  # (the other class attributes a variant may set)


def timed_variants(opt: str, precision: str, only: str | None = None) -> list:
    """:func:`variants` (those named in ``only``, comma-separated, if given, in its order: the order of each round)
    less the ones whose switches are the default's (e.g. ``+qclosed`` once the class has it on): each build is
    timed once, under the first name."""
    cls = getattr(rlx_gpu, OPTIMIZERS[opt][0])
    seen, out, names = [], [], variants(opt, precision)
    if only:  # (the order given; before 2026-12-07, always variants()' order whatever the order given)
        names = [v for v in dict.fromkeys(only.split(",")) if v in names]
    for v in names:
        sw = {**{k: getattr(cls, k, None) for k in (*SWITCHES, *EXTRA)}, **switches(v, cls)}
        if not isinstance(sw["QCLOSED"], dict):  # (a bool: both widths alike)
            sw["QCLOSED"] = dict.fromkeys((4, 8), bool(sw["QCLOSED"]))
        if v not in REWRITTEN and sw in seen:
            continue
        seen += [] if v in REWRITTEN else [sw]
        out.append(v)
    return out


# the float16 widening before unpack4_f16 took vector operations (shaders/lowp.wgsl): ``-hvec`` rewrites a module's
# unpack4_f16 back to it (the same bits; timing the change)
_SCALAR_UNPACK4_F16 = ("fn unpack4_f16(w: vec2<u32>) -> vec4<f32> {\n    return vec4<f32>(h2f(w.x & 0xffffu), "
                       "h2f(w.x >> 16u), h2f(w.y & 0xffffu), h2f(w.y >> 16u));\n}")
REWRITTEN = (*DIAGNOSTICS, "-hvec")  # (variants that rewrite the default's text: timed even with its switches)


def scalar_h2f(text: str) -> str:
    """A module's text with unpack4_f16 by four scalar h2f calls again (``-hvec``)."""
    start = text.find("fn unpack4_f16(")
    end = text.find("\n}", start) + 2
    if start < 0 or "unpack4_f16" not in text[end:]:
        raise RuntimeError("-hvec: the module has no unpack4_f16 to rewrite, or does not use it")
    return text[:start] + _SCALAR_UNPACK4_F16 + text[end:]


def switches(variant: str, cls=Optimizer) -> dict:
    """The class attributes of one variant of ``cls`` (its own switches: a bool or a dict by precision; ``off``
    leaves Adafactor's MERGE and ROWCOLS as they are: they are not drivers' switches)."""
    if variant == "off":
        return {k: False for k in SWITCHES}
    base = {k: getattr(cls, k) for k in SWITCHES}
    if variant in QFORMS:  # (one width's closed form on, as that form; the other width's as the default's)
        q, (bits, form) = base["QCLOSED"], QFORMS[variant]
        q = {w: q.get(w, False) if isinstance(q, dict) else bool(q) for w in (4, 8)}
        return dict(base, QCLOSED={**q, bits: True}, **{f"QFORM{bits}": form})
    if variant[0] in "-+":
        base[variant[1:].upper()] = variant[0] == "+"
    if variant in ("ept4", "qclosed-ept4"):  # (four vec4s a thread: half the workgroups)
        base["EPT"] = 4
    if variant.startswith("qclosed-"):
        base["QCLOSED"] = True
    if variant.startswith("finish"):  # (Adafactor.FINISH: column partials the finish pass loads at once)
        base["FINISH"] = int(variant[6:])
    if variant == "qclosed-qept4":
        base["QEPT"] = 4
    return base


def _build(opt: str, precision: str, variant: str, params: dict, grads: dict, dev):
    """The optimizer of one variant (rows.build's options), its grads on the device."""
    cls_name, kw, _, _ = OPTIMIZERS[opt]
    pd, gd, sd, master = PRECISIONS[precision]
    base = getattr(rlx_gpu, cls_name)
    cls = (diagnostic_class(base, variant, switches("default", base)) if variant in DIAGNOSTICS
           else rewritten_class(base, switches("default", base), scalar_h2f) if variant == "-hvec"
           else type(cls_name, (base,), switches(variant, base)))
    o = cls(params, lr=1e-3, **kw, state_dtype=sd, master_weights=master, grad_dtype=None if gd == pd else gd,
            device=dev)
    for n, v in grads.items():
        o.grads[n].write(v)
    return o


def time_group(dev, timer, opt: str, precision: str, shapes, args, say) -> list:
    """Every variant of one (optimizer, precision): built, warmed up, timed in alternating rounds."""
    built, rows = {}, []
    params, grads = make_params(opt, precision, shapes), make_grads(opt, precision, shapes)
    for v in timed_variants(opt, precision, args.variants):
        try:
            o = _build(opt, precision, v, params, grads, dev)
            for _ in range(3):
                o.step()
            dev.sync()
            t, _ = timer.measure(o.step, 2, 1)
            built[v] = (o, o.step, steps_for(t))
        except Exception as e:  # (a variant that does not compile or run: printed, the others go on)
            say(f"  {opt} {precision} {v}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
            traceback.print_exc(file=sys.stderr)
            rows.append({"optimizer": opt, "dtype": precision, "variant": v, "error": f"{type(e).__name__}: {e}"[:2000]})
    got = {v: [] for v in built}
    for _ in range(args.rounds):
        for v, (_o, step, n) in built.items():
            try:
                got[v].append(timer.measure(step, n, args.repeats)[0])
            except Exception as e:
                say(f"  {opt} {precision} {v}: FAILED while timing: {e}")
    moved, cls = min_bytes(opt, precision, shapes), getattr(rlx_gpu, OPTIMIZERS[opt][0])
    for v, ts in got.items():
        if not ts:
            continue
        t = median(ts)
        rows.append({"optimizer": opt, "dtype": precision, "variant": v, "ms_per_step": t * 1e3, "runs_ms":
                     [x * 1e3 for x in ts], "bytes_per_step": moved, "gbps": moved / t / 1e9,
                     "switches": switches(v, cls), "state_bytes_per_param": built[v][0].memory()["state_per_param"]})
    built.clear()
    gc.collect()
    return rows


def baselines(torch, opt: str, precision: str, shapes, args, say) -> list:
    """torch's step (and bitsandbytes' AdamW8bit) on the same tensors."""
    pd, _, _, master = PRECISIONS[precision]
    specs = [] if torch is None or master or OPTIMIZERS[opt][3] is None else [OPTIMIZERS[opt][3]]
    specs += EXTRA_BASELINES.get(opt, []) if torch is not None and not master else []
    out = []
    for name, kw in specs:
        impl = f"{name}({', '.join(f'{k}={v}' for k, v in kw.items())})"
        try:
            ms = torch_step_ms(torch, shapes, (name, kw), args.repeats, pd)
            out.append({"optimizer": opt, "dtype": precision, "impl": impl, "ms_per_step": ms})
        except Exception as e:  # (not installed, or no kernel for this dtype)
            say(f"  {opt} {precision} {impl}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            out.append({"optimizer": opt, "dtype": precision, "impl": impl, "error": str(e)[:500]})
    return out


def groups(args) -> list:
    """(optimizer, precision) in the order they run: the fp32 rows (the no-regression check), the 16-bit rows of
    AdamW, SGD, Lion, LAMB and MARS, the quantized ones with bfloat16 params, the other optimizers' 16-bit rows."""
    g = [(o, "fp32") for o in ELEMENTWISE + REDUCING + QUANTIZED]
    g += [(o, p) for p in ("bf16", "f16", "bf16-master") for o in ("adamw", "sgd", "lion", "lamb", "mars")]
    g += [(o, "bf16") for o in QUANTIZED]
    g += [(o, p) for p in ("bf16", "f16", "bf16-master") for o in ELEMENTWISE + ("adafactor",)
          if o not in ("adamw", "sgd", "lion")]
    only = set(args.optimizers.split(",")) if args.optimizers else None
    prec = set(args.precisions.split(",")) if args.precisions else None
    return [x for x in g if (only is None or x[0] in only) and (prec is None or x[1] in prec)]


COLUMNS = ("off", "default", "-wide", "+wide", "-full", "-vpack", "-subgroups", "+f16round", "-f16round", "-hvec",
           "+qfull", "-qfull", "+qhoist", "-qhoist", "+qredux", "-qredux", "+qbtab", "-qbtab", "-merge", "-rowcols",
           "finish1", "finish8", "+recip", "-recip", "+ptloads", "-ptloads",
           "+qdirect", "ept4", "-qclosed", "+qclosed", "qclosed-ept4", "qclosed-qept4", *QFORMS, *DIAGNOSTICS)


def table(rows: list, base: list, copy_gbps: float) -> str:
    """One line per (optimizer, precision): each variant's fraction of the copy rate, the default's ms, its speed
    over ``off`` and over torch's step (and bitsandbytes' AdamW8bit; their times are in the JSON); errors after the
    table."""
    ref = {}
    for b in base:
        if "ms_per_step" in b:
            ref.setdefault((b["optimizer"], b["dtype"]), {})["bnb" if "bitsandbytes" in b["impl"] else "torch"] = \
                b["ms_per_step"]
    got, errors = {}, []
    for r in rows:
        if "error" in r:
            errors.append(f"{r['optimizer']} {r['dtype']} {r['variant']}: {r['error'][:160]}")
        else:
            got.setdefault((r["optimizer"], r["dtype"]), {})[r["variant"]] = r
    out = [f"copy {copy_gbps:.1f} GB/s; columns: fraction of copy at the row's own minimum bytes",
           f"{'optimizer':10} {'dtype':11} " + " ".join(f"{c:>{max(6, len(c))}}" for c in COLUMNS)
           + f" {'def ms':>8} {'x off':>6} {'x torch':>7} {'x bnb':>6}"]
    for (opt, dt), vs in got.items():
        d, o, x = vs.get("default"), vs.get("off"), ref.get((opt, dt), {})
        cells = " ".join(f"{vs[c]['gbps'] / copy_gbps:{max(6, len(c))}.3f}" if c in vs else f"{'-':>{max(6, len(c))}}"
                         for c in COLUMNS)
        ratio = (lambda k, x=x, d=d: f"{x[k] / d['ms_per_step']:7.2f}" if d and k in x else f"{'-':>7}")  # noqa: E731
        out.append(f"{opt:10} {dt:11} {cells} " + (f"{d['ms_per_step']:8.3f} " if d else f"{'-':>8} ")
                   + (f"{o['ms_per_step'] / d['ms_per_step']:6.3f} " if d and o else f"{'-':>6} ")
                   + ratio("torch") + " " + ratio("bnb")[1:])
    out += [f"baseline {b['optimizer']} {b['dtype']} {b['impl']}: ERROR {b['error'][:120]}" for b in base if "error" in b]
    return "\n".join(out + [f"ERROR {e}" for e in errors])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--set", default="gpt2-124m", help="param set (rlx-gpu bench's names)")
    ap.add_argument("--optimizers", default="", help="comma list: only these (default: all of the run)")
    ap.add_argument("--precisions", default="", help="comma list: only these (default: all of the run)")
    ap.add_argument("--variants", default="", help="comma list: only these variants (default: every one of a row)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per row")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per round (median), of ~50 ms each")
    ap.add_argument("--copy-mb", type=int, default=512)
    ap.add_argument("--budget-s", type=float, default=250.0, help="rows starting after this many seconds are left out")
    args = ap.parse_args(argv)
    say = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    dev = get_device()
    timer = Timer(dev)
    torch = torch_cuda()
    copies = copy_bandwidth(dev, timer, args.copy_mb << 20, 5)
    copy_gbps = max(copies.values())
    say(f"{dev.name} ({dev.implementation}), features {sorted(dev.features)}; copy {copies}")
    shapes = param_set(args.set)
    rows, base, left = [], [], []
    for opt, precision in groups(args):
        if time.perf_counter() - t0 > args.budget_s:
            left.append(f"{opt} {precision}")
            continue
        rows += time_group(dev, timer, opt, precision, shapes, args, say)
        base += baselines(torch, opt, precision, shapes, args, say)
        done = [r for r in rows if r["optimizer"] == opt and r["dtype"] == precision and "gbps" in r]
        say(f"{opt} {precision}: " + ", ".join(f"{r['variant']} {r['gbps'] / copy_gbps:.2f}" for r in done)
            + f" of copy ({time.perf_counter() - t0:.0f} s)")
    out = {"adapter": dev.name, "implementation": dev.implementation, "features": sorted(dev.features),
           "copy_gbps": copy_gbps, "copy_variants_gbps": copies, "param_set": args.set, "rows": rows,
           "baselines": base, "left_out": left, "seconds": time.perf_counter() - t0,
           "torch": getattr(torch, "__version__", None), "defaults": {k: getattr(Optimizer, k) for k in SWITCHES}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print(table(rows, base, copy_gbps))
    if left:
        print(f"left out (past --budget-s {args.budget_s:g}): {', '.join(left)}")
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
