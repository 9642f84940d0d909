"""The facts behind harden3's fixes, printed on the adapter at hand (the H200): which fp8 rule the installed torch's
casts follow at the boundary values; whether the reducing optimizers (LAMB, Mars, Adafactor) give the same bits run
twice (plain driver and FULL), how many elements FULL changes, and whether FULL with the tail masks kept (the
select between each per-lane term and its sum) is bit for bit the plain driver (then the compiler's fusing of a
term into its sum is the cause); and whether the moving-average observers now equal their twins. A table on stdout,
everything in $OUT/harden3.json; a section that fails prints its error and the others go on.

    python benchmarks/h200_harden3.py
"""
import json
import os
import sys
import time
import traceback

import ml_dtypes
import numpy as np
import torch

import rlx_gpu
from rlx_gpu.engine import codegen
from rlx_gpu.reference import qat as R
from rlx_gpu.reference import qat_observers as O

sys.path.insert(0, "tests")
from test_kernel_variants import OFF, _run, _variant  # noqa: E402
from test_qat import FP8_EDGES, TORCH_FP8, batches, bits  # noqa: E402

OUT = {}


def fp8():
    rows = {}
    for fmt, (vals, _, _) in FP8_EDGES.items():
        x = np.array(vals + [-v for v in vals], np.float32)
        codes = torch.from_numpy(x).to(TORCH_FP8[fmt]).view(torch.uint8).numpy()
        rule = [name for name, sat in (("saturate=True", True), ("saturate=False", False))
                if (R.fp8_codes(x, fmt, sat) == codes).all()]
        rows[fmt] = {"torch": torch.__version__, "codes": [hex(c) for c in codes], "rule": rule or ["neither"]}
        print(f"fp8 {fmt}: torch {torch.__version__} casts {vals} to {[hex(c) for c in codes[:len(vals)]]}: {rule}")
    return rows


def _masked_full(src: str) -> str:
    return src.replace("let keep = vec4<bool>(false);", "let keep = tail(i, blk.z);")


def reductions(device):
    rows = {}
    orig = codegen.elementwise
    for name in ("LAMB", "Mars", "Adafactor"):
        for dt in ("float32", "bfloat16"):
            rng = np.random.default_rng(5)
            d = np.float32 if dt == "float32" else ml_dtypes.bfloat16
            params = {"t7": rng.standard_normal(2049).astype(d), "t9": rng.standard_normal((65, 64)).astype(d),
                      "big": rng.standard_normal((600, 512)).astype(d)}
            full = dict(OFF, FULL=True)
            runs = {k: [_run(_variant(name, sw), params, {}, device) for _ in range(2)]
                    for k, sw in (("plain", OFF), ("full", full))}
            codegen.elementwise = lambda *a, **k: _masked_full(orig(*a, **k))
            try:
                runs["full_masked"] = [_run(_variant(name, full), params, {}, device)]
            finally:
                codegen.elementwise = orig

            def apart(a, b):
                (pa, sa), (pb, sb) = a, b
                n = sum(int((bits(np.asarray(pa[t])) != bits(np.asarray(pb[t]))).sum()) for t in pa)
                return n + sum(int((bits(sa[t][k]) != bits(sb[t][k])).sum()) for t in sa for k in sa[t])
            r = {"plain_twice": apart(*runs["plain"]), "full_twice": apart(*runs["full"]),
                 "full_vs_plain": apart(runs["full"][0], runs["plain"][0]),
                 "full_masked_vs_plain": apart(runs["full_masked"][0], runs["plain"][0])}
            rows[f"{name} {dt}"] = r
            print(f"{name:9s} {dt:8s} elements apart: plain run twice {r['plain_twice']}, FULL twice "
                  f"{r['full_twice']}, FULL vs plain {r['full_vs_plain']}, FULL with masks vs plain "
                  f"{r['full_masked_vs_plain']}")
    return rows


def observers(device):
    from rlx_gpu import qat
    rows = {}
    for name in ("MovingAverageMinMaxObserver", "MovingAveragePerChannelMinMaxObserver"):
        rng = np.random.default_rng(9)
        g, t = getattr(qat, name)(averaging_constant=0.3), getattr(O, name)(averaging_constant=0.3)
        for x in batches(rng, 8, shape=(5, 3, 7)):
            g(x)
            t(x)
        n = int((bits(g.calculate_qparams()[0]) != bits(t.calculate_qparams()[0])).sum())
        n += int((bits(g.min_val) != bits(t.min_val)).sum() + (bits(g.max_val) != bits(t.max_val)).sum())
        rows[name] = n
        print(f"{name}: {n} scale/min/max values apart from the twin")
    return rows


if __name__ == "__main__":
    t0 = time.time()
    device = rlx_gpu.get_device()
    OUT["adapter"] = device.name
    print(device.name, "max_storage_binding", device.max_storage_binding)
    for key, fn in (("fp8", fp8), ("reductions", lambda: reductions(device)), ("observers", lambda: observers(device))):
        try:
            OUT[key] = fn()
        except Exception as e:  # (one section failing leaves the others' figures)
            OUT[key] = {"error": repr(e)}
            traceback.print_exc()
            print(f"{key}: FAILED {e!r}")
    OUT["seconds"] = round(time.time() - t0, 1)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "harden3.json"), "w") as f:
        json.dump(OUT, f, indent=1)
    print(f"done in {OUT['seconds']} s")
