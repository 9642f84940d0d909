"""The quantized drivers' code search in closed form (``Optimizer.QCLOSED``; the form and its check:
:mod:`rlx_gpu.core.qclosed`): ``q_code_<tag>(v, a, inv)`` as :mod:`.qcodegen`'s guide-table search defines it, the
same codes, without the guide. 8-bit: the decade's line, one midpoint; 4-bit: the bisection over constants."""
from __future__ import annotations

from ..core import qclosed, quant

__all__ = ["closed_code_fn"]


def _f(v) -> str:
    """A float32 value as a WGSL literal that parses back to the same float32 (its exact decimal)."""
    return f"{float(v)!r}f"


def closed_code_fn(tag: str, bits: int) -> list:
    """``q_code_<tag>`` for the signed (``s``) or unsigned (``u``) map of ``bits`` bits, in closed form."""
    return _decades(tag) if bits == 8 else _bisection(tag, quant.midpoints(bits, tag == "s"))


def _decades(tag: str) -> list:
    low, slope, icpt = qclosed.decades(tag == "s")
    lo, hi = qclosed.SCALE_RANGE
    pick = [f"    s = select(s, {_f(slope[d + 1])}, ax >= {_f(low[d])}); c = select(c, {_f(icpt[d + 1])}, "
            f"ax >= {_f(low[d])});" for d in range(6)]
    mirror = "select(ga, 253 - ga, x < 0.0), 0, 254" if tag == "s" else "select(ga, 0, x < 0.0), 0, 254"
    return [f"fn q_code_{tag}(v: f32, a: f32, inv: f32) -> u32 {{",
            "    // g: the floor of |x|'s place on its decade's line (x = v / a; mirrored below 0), the code or one",
            "    // below it for every x (core/qclosed.py checks it); one midpoint settles it",
            "    let sc = select(a, 1.0, a == 0.0);",
            "    let x = v * inv;",
            f"    if ((bitcast<u32>(x) & ABS_BITS) >= EXP_BITS || sc < {_f(lo)} || sc > {_f(hi)}) {{",
            f"        return select(q_search_{tag}(v, sc), 0u, is_nan(v));  // x inf/NaN, or products out of range",
            "    }",
            "    let ax = abs(x);",
            f"    var s = {_f(slope[0])};", f"    var c = {_f(icpt[0])};", *pick,
            "    let ga = i32(clamp(s * ax + c, 0.0, 254.0));",
            f"    let g = u32(clamp({mirror}));",
            f"    return g + select(0u, 1u, sc * q_t_{tag}(g) < v);", "}"]


def _bisection(tag: str, mids) -> list:
    """The bisection of :func:`rlx_gpu.core.quant._search` over 2**k - 1 midpoints held as constants: step
    ``st`` compares midpoint ``c + st - 1``, picked from the steps before by a tree of selects."""
    n = len(mids) + 1
    steps = [n >> (k + 1) for k in range(n.bit_length() - 1)]  # 8, 4, 2, 1 for 16 codes

    def pick(done: list, base: int, st: int) -> str:
        if not done:
            return _f(mids[base + st - 1])
        (w, b), rest = done[0], done[1:]
        return f"select({pick(rest, base, st)}, {pick(rest, base + w, st)}, {b})"
    L = [f"fn q_code_{tag}(v: f32, a: f32, inv: f32) -> u32 {{", "    // the bisection, the midpoints as constants",
         "    let sc = select(a, 1.0, a == 0.0);"]
    done = []
    for st in steps:
        L.append(f"    let b{st} = sc * {pick(done, 0, st)} < v;")
        done.append((st, f"b{st}"))
    return L + ["    return " + " | ".join(f"select(0u, {st}u, b{st})" for st in steps) + ";", "}"]
