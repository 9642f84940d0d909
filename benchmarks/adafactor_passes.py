"""Where Adafactor's step goes, pass by pass (issue 25: Adafactor's 16-bit rows at 0.35 of copy take nearly the
fp32 row's time, so its passes, not its bytes, bound it): timing-only subclasses that run only the first k of the
step's dependent passes (results wrong on purpose for k < all; nothing in the package reaches them), k = 1 .. all,
timed in alternating rounds on GPT-2 124M; a pass's cost is its prefix's time minus the one before.

    python benchmarks/adafactor_passes.py [--precisions fp32,bf16] [--finish 1,16] [--rounds 3] [--json out.json]
    python benchmarks/adafactor_passes.py --variants default,+recip,+ptloads,+recip+ptloads --budget-s 100

(``--finish``: the prefixes of each ``Adafactor.FINISH`` given, all timed in the same alternating rounds; a row's
name then ends in ``finish<F>``. ``--variants``: instead, the class's switches as named, all in the same rounds:
``default``, ``finish<F>``, ``+recip`` (Adafactor.RECIP: direction()'s row by a reciprocal), ``+ptloads``
(Optimizer.PTLOADS: the ratio pass loads 8 partials at once), ``+cscale`` (Adafactor.CSCALE: direction()'s column
factors divided by the row mean once, in the mean pass), ``+rsqrt`` (Adafactor.RSQRT: the factors' reciprocal
square roots once a row and a column, none an element), sums of them such as ``+recip+ptloads``, and the
timing-only knock-outs ``x-dir``, ``x-div``, ``x-loads``, ``x-red`` (KNOCKOUTS: parts of update_norm's and apply's
per-element work left out, results wrong on purpose).)
(``--budget-s``: the precisions not started by then are left out, named at the end.)

(``--set gpt2:LAYERS,WIDTH``: GPT-2's shapes with fewer layers or a smaller width, for a CPU adapter.)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time

import rlx_gpu
from rlx_gpu.runtime.device import get_device
from rlx_gpu.tools.bench.rows import grads as make_grads
from rlx_gpu.tools.bench.rows import start_params as make_params
from rlx_gpu.tools.bench.shapes import OPTIMIZERS, PRECISIONS, gpt2_shapes, min_bytes, param_set
from rlx_gpu.tools.bench.timing import Timer, copy_bandwidth, median, steps_for


# Timing-only knock-outs (results wrong on purpose; shaders/adafactor.wgsl's XK, or update_norm's reduction left
# out): what direction()'s parts and update_norm's block sums cost in update_norm and apply.
KNOCKOUTS = {"x-dir": {"XK": 1},  # direction() is g: no aux load, no division, no inverseSqrt
             "x-div": {"XK": 2},  # no division by the row mean (nor its load; CSCALE: the mean pass copies C to CN)
             "x-loads": {"XK": 3},  # no aux load (the row and column indices still found)
             "x-red": {"XRED": True}}  # update_norm sums nothing (no block reduction; the ratio pass reads stale sums)


def variant_switches(name: str) -> dict:
    """The class attributes of one ``--variants`` name (``default``: none; ``finish<F>``; a knock-out of
    ``KNOCKOUTS``; ``+recip`` / ``-recip``, ``+ptloads`` / ``-ptloads``, ``+cscale`` / ``-cscale``, ``+rsqrt`` /
    ``-rsqrt`` (on / off) and
    their sums, e.g. ``-recip-ptloads``)."""
    if name == "default":
        return {}
    if name.startswith("finish"):
        return {"FINISH": int(name[6:])}
    if name in KNOCKOUTS:
        return dict(KNOCKOUTS[name])
    known = {"recip": "RECIP", "ptloads": "PTLOADS", "cscale": "CSCALE", "rsqrt": "RSQRT"}
    parts = re.findall(r"([+-])([a-z]+)", name)
    if not parts or "".join(a + b for a, b in parts) != name or not all(b in known for _, b in parts):
        raise ValueError(f"--variants: unknown variant {name!r}; expected default, finish<F> or sums of "
                         f"+/-{', +/-'.join(known)}")
    return {known[b]: a == "+" for a, b in parts}


def prefix_class(k: int, finish: int = rlx_gpu.Adafactor.FINISH, XK: int = 0, XRED: bool = False,
                 **switches) -> type:
    """Adafactor (with ``FINISH = finish`` and the class attributes ``switches``) running only the first ``k``
    passes of its default pass list (timing only); ``XK``, ``XRED``: a knock-out of ``KNOCKOUTS``."""
    full = rlx_gpu.Adafactor.pass_list(rlx_gpu.Adafactor.MERGE, rlx_gpu.Adafactor.ROWCOLS)
    if XRED:
        full = tuple(dataclasses.replace(p, reduce="") if p.entry == "update_norm" else p for p in full)
    body = {"FINISH": finish, **switches, "pass_list": staticmethod(lambda merge, rowcols: full[:k])}
    if XK:
        body["constants"] = {**rlx_gpu.Adafactor.constants, "XK": XK}
    return type("Adafactor", (rlx_gpu.Adafactor,), body)


def time_precision(dev, timer, precision: str, shapes, rounds: int, repeats: int, variants=("default",)) -> dict:
    """Every prefix of one precision built for each of ``variants`` (:func:`variant_switches`), then all timed in
    alternating rounds (each round's first row timed twice, the first discarded: the first row timed ran slow in
    every earlier run, PERF_NOTES 63): {variant: {k: (pass name, median s)}}."""
    _, kw, _, _ = OPTIMIZERS["adafactor"]
    pd, gd, sd, master = PRECISIONS[precision]
    params, grads = make_params("adafactor", precision, shapes), make_grads("adafactor", precision, shapes)
    names = [p.entry for p in rlx_gpu.Adafactor.passes]
    built = {}
    for f in variants:
        sw = variant_switches(f)  # (FINISH among them overrides prefix_class's finish)
        for k in range(1, len(names) + 1):
            o = prefix_class(k, **sw)(params, lr=1e-3, **kw, state_dtype=sd, master_weights=master,
                                      grad_dtype=None if gd == pd else gd, device=dev)
            for n, v in grads.items():
                o.grads[n].write(v)
            for _ in range(3):
                o.step()
            dev.sync()
            built[(f, k)] = (o, steps_for(timer.measure(o.step, 2, 1)[0]))
    got = {key: [] for key in built}
    for _ in range(rounds):
        o, n = next(iter(built.values()))
        timer.measure(o.step, n, 1)
        for key, (o, n) in built.items():
            got[key].append(timer.measure(o.step, n, repeats)[0])
    out = {}
    for (f, k), ts in got.items():
        out.setdefault(f, {})[k] = (names[k - 1], median(ts))
    return out


def report(out: dict, row: str, res: dict, moved: float, copy: float) -> None:
    """One row's prefixes and passes into ``out["rows"][row]``, and printed."""
    whole = res[max(res)][1]
    out["rows"][row] = {name: {"prefix_ms": t * 1e3, "pass_ms": (t - res.get(k - 1, ("", 0.0))[1]) * 1e3}
                        for k, (name, t) in res.items()}
    print(f"\n{row}: whole step {whole * 1e3:.3f} ms = {moved / whole / 1e9 / copy:.3f} of copy "
          f"(min bytes {moved / 1e9:.3f} GB; at the copy rate {moved / copy / 1e6:.3f} ms)")
    for name, r in out["rows"][row].items():
        print(f"  {name:12s} prefix {r['prefix_ms']:7.3f} ms  pass {r['pass_ms']:7.3f} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="gpt2-124m")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--finish", default=str(rlx_gpu.Adafactor.FINISH), help="Adafactor.FINISH values, e.g. 1,16")
    ap.add_argument("--variants", help="instead of --finish: e.g. default,+recip,+ptloads,+recip+ptloads")
    ap.add_argument("--budget-s", type=float, default=1e9, help="precisions not started by then are left out")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    variants = tuple(args.variants.split(",") if args.variants else (f"finish{f}" for f in args.finish.split(",")))
    for v in variants:  # (an unknown name: refused before anything runs)
        try:
            variant_switches(v)
        except ValueError as e:
            ap.error(str(e))
    dev = get_device()
    shapes = gpt2_shapes(*map(int, args.set[5:].split(","))) if args.set.startswith("gpt2:") else param_set(args.set)
    timer, t0 = Timer(dev), time.perf_counter()
    copy = copy_bandwidth(dev, timer, 1 << 28, args.repeats)["wgsl_copy_wg256_ept4"]
    out = {"adapter": dev.name, "set": args.set, "copy_gbps": copy, "rows": {}}
    print(f"adapter {dev.name}; copy {copy:.0f} GB/s; passes: {[p.entry for p in rlx_gpu.Adafactor.passes]}")
    skipped = []
    for precision in args.precisions.split(","):
        if time.perf_counter() - t0 > args.budget_s:
            skipped.append(precision)
            continue
        try:
            res = time_precision(dev, timer, precision, shapes, args.rounds, args.repeats, variants)
        except Exception as e:  # (printed; the next precision goes on)
            print(f"{precision}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
            continue
        for f, r in res.items():
            report(out, precision if len(res) == 1 else f"{precision} {f}", r,
                   min_bytes("adafactor", precision, shapes), copy)
    print(f"\n{time.perf_counter() - t0:.0f} s" + (f"; past --budget-s, left out: {skipped}" if skipped else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
