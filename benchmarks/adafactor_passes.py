"""Where Adafactor's step goes, pass by pass (issue 25: Adafactor's 16-bit rows at 0.35 of copy take nearly the
fp32 row's time, so its passes, not its bytes, bound it): timing-only subclasses that run only the first k of the
step's dependent passes (results wrong on purpose for k < all; nothing in the package reaches them), k = 1 .. all,
timed in alternating rounds on GPT-2 124M; a pass's cost is its prefix's time minus the one before.

    python benchmarks/adafactor_passes.py [--precisions fp32,bf16] [--finish 1,16] [--rounds 3] [--json out.json]

(``--finish``: the prefixes of each ``Adafactor.FINISH`` given, all timed in the same alternating rounds; a row's
name then ends in ``finish<F>``.)

(``--set gpt2:LAYERS,WIDTH``: GPT-2's shapes with fewer layers or a smaller width, for a CPU adapter.)
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import rlx_gpu
from rlx_gpu.runtime.device import get_device
from rlx_gpu.tools.bench.rows import grads as make_grads
from rlx_gpu.tools.bench.rows import start_params as make_params
from rlx_gpu.tools.bench.shapes import OPTIMIZERS, PRECISIONS, gpt2_shapes, min_bytes, param_set
from rlx_gpu.tools.bench.timing import Timer, copy_bandwidth, median, steps_for


def prefix_class(k: int, finish: int = rlx_gpu.Adafactor.FINISH) -> type:
    """Adafactor (with ``FINISH = finish``) running only the first ``k`` passes of its default pass list (timing
    only)."""
    full = rlx_gpu.Adafactor.pass_list(rlx_gpu.Adafactor.MERGE, rlx_gpu.Adafactor.ROWCOLS)

    class Prefix(rlx_gpu.Adafactor):
        FINISH = finish

        @staticmethod
        def pass_list(merge: bool, rowcols: bool) -> tuple:
            return full[:k]
    Prefix.__name__ = "Adafactor"
    return Prefix


def time_precision(dev, timer, precision: str, shapes, rounds: int, repeats: int, finishes=(1,)) -> dict:
    """Every prefix of one precision built for each of ``finishes`` (Adafactor.FINISH), then all timed in
    alternating rounds: {finish: {k: (pass name, median s)}}."""
    _, kw, _, _ = OPTIMIZERS["adafactor"]
    pd, gd, sd, master = PRECISIONS[precision]
    params, grads = make_params("adafactor", precision, shapes), make_grads("adafactor", precision, shapes)
    names = [p.entry for p in rlx_gpu.Adafactor.passes]
    built = {}
    for f in finishes:
        for k in range(1, len(names) + 1):
            o = prefix_class(k, f)(params, lr=1e-3, **kw, state_dtype=sd, master_weights=master,
                                   grad_dtype=None if gd == pd else gd, device=dev)
            for n, v in grads.items():
                o.grads[n].write(v)
            for _ in range(3):
                o.step()
            dev.sync()
            built[(f, k)] = (o, steps_for(timer.measure(o.step, 2, 1)[0]))
    got = {key: [] for key in built}
    for _ in range(rounds):
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
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    dev = get_device()
    shapes = gpt2_shapes(*map(int, args.set[5:].split(","))) if args.set.startswith("gpt2:") else param_set(args.set)
    timer, t0 = Timer(dev), time.perf_counter()
    copy = copy_bandwidth(dev, timer, 1 << 28, args.repeats)["wgsl_copy_wg256_ept4"]
    out = {"adapter": dev.name, "set": args.set, "copy_gbps": copy, "rows": {}}
    print(f"adapter {dev.name}; copy {copy:.0f} GB/s; passes: {[p.entry for p in rlx_gpu.Adafactor.passes]}")
    finishes = tuple(int(f) for f in args.finish.split(","))
    for precision in args.precisions.split(","):
        try:
            res = time_precision(dev, timer, precision, shapes, args.rounds, args.repeats, finishes)
        except Exception as e:  # (printed; the next precision goes on)
            print(f"{precision}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
            continue
        for f, r in res.items():
            report(out, precision if len(res) == 1 else f"{precision} finish{f}", r,
                   min_bytes("adafactor", precision, shapes), copy)
    print(f"\n{time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
