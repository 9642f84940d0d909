"""The quantized drivers' code search in closed form (``Optimizer.QCLOSED``; the form and its check:
:mod:`rlx_gpu.core.qclosed`): ``q_code_<tag>(v, a, inv)`` as :mod:`.qcodegen`'s guide-table search defines it, the
same codes, without the guide. 8-bit: the decade's line, one midpoint (``form``: ``"decade"``, the decade by six
comparisons; ``"log"``, by log2 and exp2; ``"calc"``, that and the midpoint computed, loaded only near it;
``"min"``, no decade: the least of the seven lines; ``"binade"``: of two, from a workgroup table by the exponent,
filled by ``q_load_y_<tag>(lid)`` before the maps' barrier; ``"vlog"``: log for four values at once, one branch for
the four, 2^d by bits: ``q_code4_<tag>``; ``"vlogi"``: vlog with its two roundings to an integer (the decade, g) by
the float adder and integer operations, no floor or float-to-int conversion); 4-bit: the bisection over constants."""
from __future__ import annotations

from ..core import qclosed, quant

__all__ = ["closed_code_fn", "FORMS", "FOUR"]

# the closed forms by state width (Optimizer.QFORM8, QFORM4 pick one; 4-bit "linear": the unsigned map's, the
# signed one keeps the bisection)
FORMS = {8: ("decade", "log", "calc", "min", "binade", "vlog", "vlogi"), 4: ("bisect", "linear", "lineari")}
FOUR = ("vlog", "vlogi")  # the forms of q_code4_<tag> (four values a call)
# "vlogi"/"lineari": x + 1.5 * 2^23 holds round(x) in its low bits (|x| < 2^22), its bits less MAGIC_BITS
MAGIC, MAGIC_BITS = "12582912.0", "0x4b400000"


def _f(v) -> str:
    """A float32 value as a WGSL literal that parses back to the same float32 (its exact decimal)."""
    return f"{float(v)!r}f"


def closed_code_fn(tag: str, bits: int, form: str = "") -> list:
    """``q_code_<tag>`` for the signed (``s``) or unsigned (``u``) map of ``bits`` bits, in closed form ``form``
    (one of :data:`FORMS` of the width; "": the first)."""
    form = form or FORMS[bits][0]
    if form not in FORMS[bits]:
        raise ValueError(f"QFORM{bits}: unknown form {form!r}; expected one of {list(FORMS[bits])}")
    if bits == 4:
        lin = form != "bisect" and tag == "u"
        return _bisection(tag, quant.midpoints(bits, tag == "s"), "q_bisect_u" if lin else "") + (
            _linear(form == "lineari") if lin else [])
    if form in FOUR:
        return _vlog(tag, form == "vlogi")
    y = {"decade": _decades, "min": _min_y, "binade": _binade_y}.get(form, _log_y)(tag)
    return (_binade_table(tag) if form == "binade" else []) + _head(tag) + y + _settle(tag, form == "calc")


def _linear(ints: bool = False) -> list:
    """The 4-bit unsigned map (k + 1) / 16: midpoint k is (2k + 3) / 32 exactly (the stored float32), and
    g = floor(16 x - 1) is the code or one below it (core/qclosed.check_linear4); x inf/NaN or far past 1, or the
    scale out of range: the bisection. ``ints`` ("lineari"): g = round-to-nearest(16 x - 3/2), clamped, and g as a
    float, by the adder and integer operations (as 8-bit's "vlogi": no float-to-int or int-to-float conversion;
    one below the floor only where 16 x - 1 is an integer, which check_linear4 takes too)."""
    lo, hi = qclosed.SCALE_RANGE
    head = ["fn q_code_u(v: f32, a: f32, inv: f32) -> u32 {", "    let sc = select(a, 1.0, a == 0.0);",
            "    let x = v * inv;",
            f"    if (!(abs(x) < 4.0) || sc < {_f(lo)} || sc > {_f(hi)}) {{ return q_bisect_u(v, a); }}"]
    if ints:
        return head + [f"    let mg = q_m_u(QN - 1u) * {MAGIC};  // 1.5 * 2^23 (read: the map's last entry is 1.0)",
                       f"    let g = bitcast<u32>(clamp(fma(x, 16.0, -1.5), 0.0, 14.0) + mg) - {MAGIC_BITS}u;",
                       "    let gf = bitcast<f32>(g + 0x4b000000u) - 8388608.0;",
                       "    return g + select(0u, 1u, sc * fma(gf, 0.0625, 0.09375) < v);", "}"]
    return head + ["    let g = u32(clamp(fma(x, 16.0, -1.0), 0.0, 14.0));",
                   "    return g + select(0u, 1u, sc * fma(f32(g), 0.0625, 0.09375) < v);", "}"]


def _head(tag: str) -> list:
    lo, hi = qclosed.SCALE_RANGE
    return [f"fn q_code_{tag}(v: f32, a: f32, inv: f32) -> u32 {{",
            "    // g: the floor of |x|'s place y on its decade's line (x = v / a; mirrored below 0), the code or one",
            "    // below it for every x (core/qclosed.py checks it); one midpoint settles it",
            "    let sc = select(a, 1.0, a == 0.0);",
            "    let x = v * inv;",
            f"    if ((bitcast<u32>(x) & ABS_BITS) >= EXP_BITS || sc < {_f(lo)} || sc > {_f(hi)}) {{",
            f"        return select(q_search_{tag}(v, sc), 0u, is_nan(v));  // x inf/NaN, or products out of range",
            "    }",
            "    let ax = abs(x);"]


def _decades(tag: str) -> list:
    """y: the decade by six comparisons, its slope and intercept by selects of constants."""
    low, slope, icpt = qclosed.decades(tag == "s")
    pick = [f"    s = select(s, {_f(slope[d + 1])}, ax >= {_f(low[d])}); c = select(c, {_f(icpt[d + 1])}, "
            f"ax >= {_f(low[d])});" for d in range(6)]
    return [f"    var s = {_f(slope[0])};", f"    var c = {_f(icpt[0])};", *pick, "    let y = s * ax + c;"]


def _min_y(tag: str) -> list:
    """y: the least of the seven decades' lines at |x| (core/qclosed.min_y: the lines meet at the thresholds and
    each is flatter than the one below, so the least is the decade's own): seven multiply-adds and six minima, no
    comparison, select or special function."""
    _, slope, icpt = qclosed.decades(tag == "s")
    return [f"    var y = fma(ax, {_f(slope[0])}, {_f(icpt[0])});"] + [
        f"    y = min(y, fma(ax, {_f(slope[d])}, {_f(icpt[d])}));" for d in range(1, 7)]


def _binade_table(tag: str) -> list:
    """The "binade" form's workgroup table (core/qclosed.binades) and ``q_load_y_<tag>(lid)``, which fills it (the
    caller's barrier follows)."""
    rows = qclosed.binades(tag == "s")
    fill = [f"        qy_{tag}[{k}] = vec4<f32>({', '.join(_f(v) for v in row)});" for k, row in enumerate(rows)]
    return [f"var<workgroup> qy_{tag}: array<vec4<f32>, {len(rows)}>;",
            f"fn q_load_y_{tag}(lid: u32) {{", "    if (lid == 0u) {", *fill, "    }", "}"]


def _binade_y(tag: str) -> list:
    """y: the least of the two lines of |x|'s binade (its biased exponent, clamped to the table's rows)."""
    lo, hi = qclosed.BINADE_LO, qclosed.BINADE_HI
    return [f"    let yl = qy_{tag}[clamp(bitcast<u32>(ax) >> 23u, {lo}u, {hi}u) - {lo}u];",
            "    let y = min(fma(ax, yl.x, yl.y), fma(ax, yl.z, yl.w));"]


def _log_y(tag: str) -> list:
    """y: the decade d = floor(log10|x|) + 7 (0..6), y = exp2(log2|x| + K + d log2(1/5)) + C1 2^d + C0
    (core/qclosed.log_y: within LOG_ERR of the line, which check_guess takes)."""
    k, c1, c0 = qclosed.log_consts(tag == "s")
    return [f"    let lg = log2(max(ax, {_f(qclosed.LOG_FLOOR)}));  // (log2 of 0 / subnormals: undefined)",
            f"    let fd = clamp(floor(fma(lg, {_f(qclosed.LOG10_2)}, 7.0)), 0.0, 6.0);",
            f"    let y = exp2(fma(fd, {_f(qclosed.LOG2_5TH)}, lg + {_f(k)})) + fma(exp2(fd), {_f(c1)}, {_f(c0)});"]


def _vlog(tag: str, ints: bool = False) -> list:
    """``q_code4_<tag>(v, a, inv)``: log's y and settling for four values at once, one branch for the four (any
    of them inf/NaN after the scale, or the scale out of range: the bisection for all four, the rule by
    definition), and 2^d from d's bits (d + 2^23 holds d in its low bits) where log takes exp2(d): exact, so y
    is log's within its bound (LOG_ERR takes exp2's error there; ``core/qclosed.log_y`` computes 2^d exactly).
    ``ints`` ("vlogi"): floor(z) and u32(y) (on NVIDIA a quarter-rate round and conversion each, per value and
    state) as round-to-nearest(z - 1/2), clamped, by the adder (clamp(z - 1/2) + 1.5 * 2^23 holds it in its low
    bits); it differs from the floor only where z is an integer, and then by one below: a decade picked wrongly
    at its threshold (where the two lines meet) and a y one float32 step lower, both inside LOG_ERR
    (:func:`rlx_gpu.core.qclosed.check_guess` takes every y within it of the line). Compilers may reassociate a
    sum with constants (Mesa's NIR does: a constant 1.5 * 2^23 beside the 1/2 gave other codes on llvmpipe), so
    the magic number is read from the map, behind a clamp."""
    lo, hi = qclosed.SCALE_RANGE
    k, c1, c0 = qclosed.log_consts(tag == "s")
    v4 = lambda c: f"vec4<f32>({_f(c)})"  # noqa: E731
    top = "select(vec4<f32>(254.0), vec4<f32>(253.0), neg)" if tag == "s" else "vec4<f32>(254.0)"
    g = "select(ga, vec4<u32>(253u) - ga, neg)" if tag == "s" else "select(ga, vec4<u32>(0u), neg)"
    head = [f"fn q_code4_{tag}(v: vec4<f32>, a: f32, inv: f32) -> vec4<u32> {{",
            "    let sc = select(a, 1.0, a == 0.0);",
            "    let x = v * inv;",
            "    if (any((bitcast<vec4<u32>>(x) & vec4<u32>(ABS_BITS)) >= vec4<u32>(EXP_BITS)) || "
            f"sc < {_f(lo)} || sc > {_f(hi)}) {{",
            "        // (x inf/NaN, or products out of range: the bisection; NaN: code 0; lane by lane, no dynamic index)",
            "        return vec4<u32>(" + ", ".join(f"select(q_search_{tag}(v.{c}, sc), 0u, is_nan(v.{c}))" for c in "xyzw")
            + ");", "    }",
            "    let ax = abs(x);",
            f"    let lg = log2(max(ax, {v4(qclosed.LOG_FLOOR)}));",
            "    let neg = x < vec4<f32>(0.0);"]
    y = f"    let y = exp2(fma(fd, {v4(qclosed.LOG2_5TH)}, lg + {v4(k)})) + fma(p2, {v4(c1)}, {v4(c0)});"
    lo4 = f"vec4<f32>({'127.0' if tag == 's' else '0.0'})"
    if ints:
        body = ["    // 1.5 * 2^23 (the map's last entry is 1.0: read, so no compiler folds it into a constant beside it):",
                "    // clamp(z) + mg holds round(z) in its low bits (the clamp keeps any rewrite of the sum away)",
                f"    let mg = vec4<f32>(q_m_{tag}(QN - 1u) * {MAGIC});",
                f"    let di = bitcast<vec4<u32>>(clamp(fma(lg, {v4(qclosed.LOG10_2)}, vec4<f32>(6.5)), vec4<f32>(0.0), "
                f"vec4<f32>(6.0)) + mg) - vec4<u32>({MAGIC_BITS}u);  // the decade",
                "    let fd = bitcast<vec4<f32>>(di + vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0);",
                "    let p2 = bitcast<vec4<f32>>((di << vec4<u32>(23u)) + vec4<u32>(0x3f800000u));  // 2^d", y,
                f"    let ga = bitcast<vec4<u32>>(clamp(y - vec4<f32>(0.5), {lo4}, {top}) + mg) - vec4<u32>({MAGIC_BITS}u);"]
    else:
        body = [f"    let fd = clamp(floor(fma(lg, {v4(qclosed.LOG10_2)}, vec4<f32>(7.0))), vec4<f32>(0.0), vec4<f32>(6.0));",
                "    let p2 = bitcast<vec4<f32>>((bitcast<vec4<u32>>(fd + vec4<f32>(8388608.0)) << vec4<u32>(23u)) + "
                "vec4<u32>(0x3f800000u));  // 2^d", y, f"    let ga = vec4<u32>(clamp(y, {lo4}, {top}));"]
    return head + body + [f"    let g = {g};",
                          f"    let t = vec4<f32>(q_t_{tag}(g.x), q_t_{tag}(g.y), q_t_{tag}(g.z), q_t_{tag}(g.w));",
                          "    return g + select(vec4<u32>(0u), vec4<u32>(1u), sc * t < v);", "}"]


def _settle(tag: str, calc: bool) -> list:
    """g from y, and the code: one midpoint comparison (``calc``: with the midpoint computed, :func:`_mid`)."""
    mirror = "select(ga, 253u - ga, x < 0.0)" if tag == "s" else "select(ga, 0u, x < 0.0)"
    top = "select(254.0, 253.0, x < 0.0)" if tag == "s" else "254.0"  # (253 - ga >= 0)
    L = [f"    let ga = u32(clamp(y, {'127.0' if tag == 's' else '0.0'}, {top}));", f"    let g = {mirror};"]
    exact = f"g + select(0u, 1u, sc * q_t_{tag}(g) < v)"
    return L + (_mid(tag, exact) if calc else [f"    return {exact};"]) + ["}"]


def _mid(tag: str, exact: str) -> list:
    """The midpoint g as UNIT * (A(t) + A(t + 1)) in u32 arithmetic (core/qclosed.MIDS: within 2 float32 steps of
    the stored one, check_mids), so sc * it decides unless v lies within MID_BAND of it (then the stored one does)."""
    base, zt, zs, top, one, unit = qclosed.MIDS[tag == "s"]
    t = "ga - 127u" if tag == "s" else "g + 1u"
    return [f"    let t = {t};", "    let e = firstLeadingBit(max(t, 1u));",
            "    let p5 = select(1u, 5u, (e & 1u) != 0u) * select(1u, 25u, (e & 2u) != 0u) * "
            "select(1u, 625u, (e & 4u) != 0u);  // 5^e",
            "    let a0 = p5 * (18u * t + 9u - (16u << e));  // A(t) (t = 0: not used)",
            "    var sm = select(2u * a0 + 18u * p5, a0 + 5u * p5 * ((4u << e) + 9u), t + 1u == (2u << e));",
            f"    sm = select(select(sm, a0 + {one}u, t == {top}u), {zs}u, t == {zt}u);",
            f"    let m = f32(sm) * {_f(unit)};",
            f"    let p = sc * {'select(m, -m, x < 0.0)' if tag == 's' else 'm'};",
            f"    if (abs(v - p) <= abs(p) * {_f(qclosed.MID_BAND)}) {{ return {exact}; }}",
            "    return g + select(0u, 1u, p < v);"]


def _bisection(tag: str, mids, name: str = "") -> list:
    """The bisection of :func:`rlx_gpu.core.quant._search` over 2**k - 1 midpoints held as constants: step
    ``st`` compares midpoint ``c + st - 1``, picked from the steps before by a tree of selects (``q_code_<tag>``, or
    a function ``name`` of ``(v, a)``)."""
    n = len(mids) + 1
    steps = [n >> (k + 1) for k in range(n.bit_length() - 1)]  # 8, 4, 2, 1 for 16 codes

    def pick(done: list, base: int, st: int) -> str:
        if not done:
            return _f(mids[base + st - 1])
        (w, b), rest = done[0], done[1:]
        return f"select({pick(rest, base, st)}, {pick(rest, base + w, st)}, {b})"
    L = [f"fn {name}(v: f32, a: f32) -> u32 {{" if name else f"fn q_code_{tag}(v: f32, a: f32, inv: f32) -> u32 {{",
         "    // the bisection, the midpoints as constants",
         "    let sc = select(a, 1.0, a == 0.0);"]
    done = []
    for st in steps:
        L.append(f"    let b{st} = sc * {pick(done, 0, st)} < v;")
        done.append((st, f"b{st}"))
    return L + ["    return " + " | ".join(f"select(0u, {st}u, b{st})" for st in steps) + ";", "}"]
