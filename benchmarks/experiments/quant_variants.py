"""Where the time of a quantized AdamW step goes (PERF_NOTES 33): the generated kernel with parts of it replaced by
trivial code (wrong results, timing only), on one tensor, GPU timestamps, alternating rounds.

    python benchmarks/experiments/quant_variants.py [--n 67108864] [--rounds 3]
"""
import argparse
import json

import numpy as np

import re

import rlx_gpu
from rlx_gpu.tools.bench.timing import Timer, median


def re_close(text, src):
    """``X_map(i]`` -> ``bitcast<f32>(X[i])`` (map entry i) and ``X_mid(i]`` -> ``bitcast<f32>(X[QN + i])``."""
    for tag, name in src.items():
        text = re.sub(rf"{name}_map\(([^\]]*)\]", rf"bitcast<f32>({name}[\1])", text)
        text = re.sub(rf"{name}_mid\(([^\]]*)\]", rf"bitcast<f32>({name}[QN + \1])", text)
    return text
from rlx_gpu.engine import qcodegen

ORIG = {k: getattr(qcodegen, k) for k in ("q_helpers", "q_elementwise")}


def variant(name):
    """Parts of the kernel replaced (names joined by '+': e.g. wg512x1+guide_global). AdamW's states: exp_avg
    (signed map) and exp_avg_sq (unsigned)."""
    src = {"s": "exp_avg_q", "u": "exp_avg_sq_q"}

    def helpers(*a, **k):
        text = ORIG["q_helpers"](*a, **k)
        if "guide_global" in name or "all_global" in name:  # the guide read from the state buffer (L1), not copied
            text = "\n".join(ln for ln in text.splitlines() if "qg_s[j] =" not in ln and "qg_u[j] =" not in ln)
            for tag in ("s", "u"):
                text = text.replace(f"qg_{tag}[idx >> 2u]", f"{src[tag]}[2u * QN + (idx >> 2u)]")
        if "all_global" in name:  # maps and midpoints read from the state buffer too
            text = "\n".join(ln for ln in text.splitlines() if "for (var j = lid; j < QN;" not in ln)
            for tag in ("s", "u"):
                text = text.replace(f"qm_{tag}[", f"{src[tag]}_map(").replace(f"qt_{tag}[", f"{src[tag]}_mid(")
            text = re_close(text, src)
        if name in ("guess_only", "no_search"):
            text = text.replace("    return near;", "    return " + ("c;" if name == "guess_only" else "0u;"))
        if name == "no_dequant":
            for tag in ("s", "u"):
                text = text.replace(f"vec4<f32>(qm_{tag}[c.x], qm_{tag}[c.y], qm_{tag}[c.z], qm_{tag}[c.w])",
                                    f"vec4<f32>(f32(w) * 0.0 + qm_{tag}[0u])")
        return text

    def elementwise(*a, **k):
        text = ORIG["q_elementwise"](*a, **k)
        if name == "no_atomics":  # (the block keys and +inf flags: absmax words of 1.0)
            text = "\n".join(ln for ln in text.splitlines() if "atomicMax" not in ln and "atomicOr" not in ln)
            for arr, word in (("qamax", "0x3f800000u"), ("qinf", "0u")):
                text = re.sub(rf"atomicLoad\(&{arr}\[([^\]]*)\]\)", rf"({word} + 0u * atomicLoad(&{arr}[\1]))", text)
        return text
    qcodegen.q_helpers, qcodegen.q_elementwise = helpers, elementwise
    import rlx_gpu.engine.codegen as cg
    cg.q_helpers, cg.q_elementwise = helpers, elementwise


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=67108864)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--variants", default="full,guess_only,no_search,no_dequant,no_atomics,qk4,qk32,fp32,wg256x1,"
                    "wg512x1,wg256x4,wg128x4", help="comma list; wgAxB: workgroup size A, EPT B")
    args = ap.parse_args()
    dev = rlx_gpu.get_device()
    timer = Timer(dev)
    ap_names = args.variants.split(",")
    names = [n for n in ap_names if n]
    res = {k: [] for k in names}
    for _ in range(args.rounds):
        for name in names:
            variant(name if name not in ("qk4", "qk32") else "full")  # (and wgAxB[+...]: the shape, then parts)
            qk = {"qk4": 4, "qk32": 32}.get(name, 8)
            import rlx_gpu.engine.optimizer as om
            qcodegen.QK = om.QK = qk
            bits = None if name == "fp32" else 8
            cls = rlx_gpu.AdamW
            if name.startswith("wg"):
                wg, ept = (int(x) for x in name.split("+")[0][2:].split("x"))
                cls = type("AdamW", (rlx_gpu.AdamW,), {"WG": wg, "EPT": ept})
            opt = cls({"w": np.full(args.n, 0.01, np.float32)}, state_bits=bits, device=dev)
            opt.grads["w"].write(np.full(args.n, 1e-3, np.float32))
            for _ in range(3):
                opt.step()
            t, _ = timer.calibrated(opt.step, 5, probe=2)
            res[name].append(t * 1e3)
            del opt
    out = {k: median(v) for k, v in res.items()}
    for k, v in out.items():
        print(f"{k:12s} {v:.3f} ms")
    if args.json:
        json.dump(out, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
