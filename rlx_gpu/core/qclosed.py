"""The code search in closed form (``Optimizer.QCLOSED``): what the kernels compute instead of the guide table's
guess, and the check that it gives every code the search gives (the rule: :mod:`rlx_gpu.core.quant`).

8-bit maps (bitsandbytes' dynamic maps): decade ``d`` (d = 0..6) holds ``n_d`` entries (signed: 2^d, unsigned:
2^(d+1)) spaced evenly in ``[10^(d-7), 10^(d-6)]``, ``10^(d-6) (0.1 + (k + 1/2) 0.9 / n_d)``, from code
``off_d``. So ``y = S_d |x| + C_d`` (``S_d = 10^(6-d) n_d / 0.9``, ``C_d = off_d - 0.1 n_d / 0.9 - 1/2``) is the
continuous position of ``|x|`` among the codes: a midpoint between codes j and j + 1 sits at y = j + 1/2 within
0.25 (between decades too: the two decades' lines meet at the boundary). The kernel picks the decade by six
comparisons of ``|x|`` with ``10^(d-7)`` (selects of constants), takes ``g = floor(y)`` (mirrored for a negative
``x`` on the signed map: ``253 - g``), clamped to ``0..254``, and the code is ``g + (s * midpoint[g] < v)``: one
midpoint load, no guide. :func:`check_guess` checks that ``g`` is the code or one below it for every float32
``x`` that can stand for ``v / s`` (within 2^-20 of it: ``1 / s`` and the product's rounding), with ``y`` rounded
either way (the compiler may fuse the multiply-add). Blocks whose scale is below 2^-100 or above 2^100 (a
product ``s * midpoint`` or ``1 / s`` could leave the normal range) and ``x`` inf/NaN take the bisection, as the
search did for ``x`` inf/NaN.

8-bit's other forms (``Optimizer.QFORM8``): ``"log"`` takes the decade as ``d = floor(log10|x|) + 7`` (0..6) from
``log2|x|`` and ``y = exp2(log2|x| + K + d log2(1/5)) + C1 2^d + C0`` (:func:`log_y`): no selects; the GPU's log2
and exp2 are approximate, so :func:`check_guess` takes it as any ``y`` within :data:`LOG_ERR` of the exact line.
``"calc"`` also computes the midpoint: entry ``j`` of the map is ``UNIT / 2 * 5^e (18 t + 9 - 16 2^e)`` (``t`` its
place in the map's positive half, ``e`` its top bit: :data:`MIDS`), so midpoint ``g`` is ``UNIT`` times an integer
sum of u32 arithmetic, within 2 float32 steps of the stored one (:func:`check_mids`); ``s`` times it decides the
code unless ``v`` lies within :data:`MID_BAND` of it (relatively: the two products differ by less), where the
stored midpoint is loaded: the search reads no memory for nearly every value. ``"min"`` takes no decade at all:
each decade's line is flatter than the one below (``S_(d+1) / S_d = 2 / 10``) and the two meet at their threshold,
so the piecewise line is concave and equals the least of the seven lines (:func:`min_y`): seven multiply-adds and
six minima. In float32 the lines meet only to within their constants' rounding, so near a threshold the least may
be the other line: :func:`check_guess` takes it as any ``y`` within :data:`MIN_ERR` of the exact line.
``"binade"`` takes the least of two lines only, read from a table by the float32 exponent of ``|x|``
(:func:`binades`: each binade holds at most one threshold, so the two decades around it), within the same bound.

4-bit maps (16 entries): the bisection itself, four steps over the 15 midpoints held as constants (selects in a
tree; no table, no workgroup memory), which is the count of the rule by definition. ``QFORM4 = "linear"``: the
unsigned map is (k + 1) / 16, its midpoints (2k + 3) / 32 exactly, so ``g = floor(16 x - 1)`` (clamped to 0..14,
the code or one below it: :func:`check_linear4`) and one comparison with ``s * (g / 16 + 3 / 32)``.

The maps are the library's own (a state dict with another map is refused: :func:`rlx_gpu.core.quant.split_state`),
so every quantized bucket can take the closed form.
"""
from __future__ import annotations

import numpy as np

from . import quant

__all__ = ["decades", "guess", "check_guess", "log_y", "LOG_ERR", "min_y", "MIN_ERR", "binades", "binade_y", "MIDS",
           "MID_BAND", "check_linear4", "mid_sums", "check_mids", "SCALE_RANGE"]

F32 = np.float32
SCALE_RANGE = (2.0 ** -100, 2.0 ** 100)  # block scales outside take the bisection
DELTA = 2.0 ** -20  # how far x = v * (1 / s) may be from v / s, relatively


def decades(signed: bool) -> tuple:
    """(thresholds ``10^(d-7)`` for d = 1..6, slopes ``S_d`` and intercepts ``C_d`` for d = 0..6) of an 8-bit
    dynamic map, as float32 (the module docstring)."""
    low, slope, icpt = [], [], []
    off = 128 if signed else 1
    for d in range(7):
        n = 2 ** d if signed else 2 ** (d + 1)
        low.append(10.0 ** (d - 7))
        slope.append(10.0 ** (6 - d) * n / 0.9)
        icpt.append(off - 0.1 * n / 0.9 - 0.5)
        off += n
    return np.array(low[1:], F32), np.array(slope, F32), np.array(icpt, F32)


def _mad(s, x, c, fused: bool) -> np.ndarray:
    """``s * x + c`` in float32 as a kernel computes it: fused (rounded once) or a product and a sum, each rounded."""
    return (np.float64(1) * s * x + c).astype(F32) if fused else (s * x).astype(F32) + c


def guess(x: np.ndarray, signed: bool, fused: bool = False, nudge: int = 0) -> np.ndarray:
    """The kernels' ``g`` for float32 ``x`` (int64); ``fused``: ``y`` by a fused multiply-add; ``nudge``: ``y``
    moved that many float32 steps (a fused result's double rounding)."""
    low, slope, icpt = decades(signed)
    ax = np.abs(np.asarray(x, F32))
    s, c = np.full(ax.shape, slope[0]), np.full(ax.shape, icpt[0])
    for d in range(6):
        s, c = np.where(ax >= low[d], slope[d + 1], s), np.where(ax >= low[d], icpt[d + 1], c)
    y = _mad(s, ax, c, fused)
    for _ in range(abs(nudge)):
        y = np.nextafter(y, F32(np.sign(nudge) * np.inf))
    ga = np.clip(y, 0, 254).astype(np.int64)
    g = np.where(x < 0, 253 - ga, ga) if signed else np.where(x < 0, 0, ga)
    return np.clip(g, 0, 254)


def _events(signed: bool) -> np.ndarray:
    """The x where the count of midpoints below x or ``g`` can change: midpoints, the thresholds, the places
    where ``y`` crosses an integer, 0 and 1 (positive; both signs are checked)."""
    low, slope, icpt = decades(signed)
    edges = np.concatenate([[0.0], low, [1.0]]).astype(np.float64)
    cross = []
    for d in range(7):
        ks = np.arange(np.floor(slope[d] * edges[d] + icpt[d]), np.ceil(slope[d] * edges[d + 1] + icpt[d]) + 1)
        cross.append((ks - np.float64(icpt[d])) / np.float64(slope[d]))
    pts = np.concatenate([np.abs(quant.midpoints(8, signed)), low, np.concatenate(cross), [0.0, 1.0, 2.0]])
    return np.unique(np.clip(pts, 0, 2).astype(F32))


def check_guess(signed: bool, ulps: int = 96, err: float = 0.0) -> int:
    """Check that ``g`` is the code or one below it (so one midpoint comparison settles the code) for every float32
    x within ``ulps`` steps of an event (between events nothing changes), both signs, every rounding of ``y``;
    ``err``: instead, for every ``y`` within ``err`` of the exact line (``y`` is monotone between events, so the
    extremes are at the events' neighbours; the ``"log"`` forms: :data:`LOG_ERR`). Returns the number of x
    checked; raises AssertionError naming the first x that fails."""
    pts = _events(signed).view(np.int32).astype(np.int64)
    near = np.unique((pts[:, None] + np.arange(-ulps, ulps + 1)).reshape(-1))
    xs = near[(near >= 0) & (near <= np.float32(2).view(np.int32))].astype(np.int32).view(F32)
    xs = np.concatenate([xs, -xs]) if signed else np.concatenate([xs, -xs[:1000]])
    mids = quant.midpoints(8, signed).astype(np.float64)
    x64 = xs.astype(np.float64)
    c_lo = np.searchsorted(mids, np.minimum(x64 * (1 - DELTA), x64 * (1 + DELTA)), side="left")
    c_hi = np.searchsorted(mids, np.maximum(x64 * (1 - DELTA), x64 * (1 + DELTA)), side="left")
    for fused, nudge in ((False, 0), (True, 0), (True, 1), (True, -1)) if not err else ((None, -err), (None, err)):
        g = guess(xs, signed, fused, nudge) if fused is not None else _mirror(_line(xs, signed) + nudge, xs, signed)
        bad = (g < np.minimum(c_hi - 1, 254)) | (g > c_lo)
        assert not bad.any(), (signed, fused, nudge, float(xs[bad][0]), int(g[bad][0]), int(c_lo[bad][0]),
                               int(c_hi[bad][0]))
    return xs.size


def _line(x, signed: bool) -> np.ndarray:
    """The exact ``y`` of |x| (float64): its decade's line (the module docstring)."""
    low, slope, icpt = decades(signed)
    ax = np.abs(np.asarray(x, np.float64))
    d = np.searchsorted(low.astype(np.float64), ax, side="right")
    return slope.astype(np.float64)[d] * ax + icpt.astype(np.float64)[d]


def _mirror(y, x, signed: bool) -> np.ndarray:
    """``g`` from ``y`` as the kernels take it: clamped, floored, mirrored below 0."""
    ga = np.clip(y, 0, 254).astype(np.int64)
    return np.clip(np.where(x < 0, 253 - ga, ga) if signed else np.where(x < 0, 0, ga), 0, 254)


# the "log" forms' y: log2 (WGSL: 3 ULP; |log2 x| <= 150) and exp2 (3 + 2|arg| ULP, |arg| <= 8) put y - C within
# ~2e-5 relatively, ~2e-3 absolutely; a decade picked wrongly within that of its threshold costs < 1e-3 (the two
# lines meet there); exp2(d) for 2^d in C: < 2e-4. So y is within LOG_ERR of the line with a margin of 4.
LOG_ERR = 0.02
LOG10_2, LOG2_5TH = F32(np.log10(2.0)), F32(np.log2(0.2))
LOG_FLOOR = F32(2.0 ** -100)  # |x| below it taken as it (y moves by < 1e-23)


def log_consts(signed: bool) -> tuple:
    """(K, C1, C0) of the "log" forms' y = exp2(log2|x| + K + d log2(0.2)) + C1 2^d + C0 (float32)."""
    n0 = 1 if signed else 2
    return F32(np.log2(1e6 * n0 / 0.9)), F32(8 / 9 * n0), F32(126.5 if signed else -1.5)


def log_y(x, signed: bool) -> np.ndarray:
    """The "log" forms' ``y`` in float32 as the kernels compute it (NumPy's log2/exp2, more exact than a GPU's)."""
    k, c1, c0 = log_consts(signed)
    lg = np.log2(np.maximum(np.abs(np.asarray(x, F32)), LOG_FLOOR))
    fd = np.clip(np.floor(lg * LOG10_2 + F32(7)), 0, 6).astype(F32)
    return np.exp2(fd * LOG2_5TH + (lg + k)).astype(F32) + (np.exp2(fd) * c1 + c0).astype(F32)


# the "min" form's y: seven float32 lines (constants within half a float32 step of the exact ones: < 2e-5 of y at
# |x| <= 2), each multiply-add rounded once or twice (< 3e-5), the least of them within those of the exact line
# also where it is the neighbouring decade's (the lines cross within that of the threshold): < 1e-4 in all.
# MIN_ERR has a margin of 10 (test_qclosed measures the bound over every x that matters).
MIN_ERR = 1e-3


def min_y(x, signed: bool, fused: bool = False) -> np.ndarray:
    """The "min" form's ``y`` in float32 as the kernels compute it (``fused``: each line by a fused multiply-add,
    else a product and a sum each rounded)."""
    _, slope, icpt = decades(signed)
    ax = np.abs(np.asarray(x, F32))
    return np.minimum.reduce([_mad(s, ax, c, fused) for s, c in zip(slope, icpt)])


# the "binade" form: per binade of |x| (its float32 exponent, clamped to those from 2^-20, which holds the lowest
# threshold 10^-6, to 2^0), the two lines that can be the least there (the decades below and above the threshold the
# binade holds, or its decade twice): one table load and two multiply-adds, where "min" takes seven
BINADE_LO, BINADE_HI = 107, 127  # biased exponents of the first and last rows


def binades(signed: bool) -> np.ndarray:
    """The "binade" form's table: per biased exponent BINADE_LO..BINADE_HI, (S_lo, C_lo, S_hi, C_hi) (float32)."""
    low, slope, icpt = decades(signed)
    rows = []
    for e in range(BINADE_LO, BINADE_HI + 1):
        top = 2.0 ** (e - 126)  # (the binade [2^(e-127), 2^(e-126)))
        d = int(np.searchsorted(low.astype(np.float64), 2.0 ** (e - 127), side="right"))  # decade at its start
        hi = d + 1 if d < 6 and low[d] < top else d
        rows.append((slope[d], icpt[d], slope[hi], icpt[hi]))
    return np.array(rows, F32)


def binade_y(x, signed: bool, fused: bool = False) -> np.ndarray:
    """The "binade" form's ``y`` in float32 as the kernels compute it (``fused``: as :func:`min_y`)."""
    ax = np.abs(np.asarray(x, F32))
    row = binades(signed)[np.clip(ax.view(np.uint32) >> 23, BINADE_LO, BINADE_HI) - BINADE_LO]
    return np.minimum(_mad(row[..., 0], ax, row[..., 1], fused), _mad(row[..., 2], ax, row[..., 3], fused))


# the "calc" form's midpoint g (the map's entries: 10^(d-6) (0.1 + (k + 1/2) 0.9 / n_d), so an entry is UNIT / 2
# times the integer 5^e (18 t + 9 - 16 2^e), t its place in its half (signed: code - 127; unsigned: code + 1), e the
# top bit of t): per map (t of g's entry - g, t of the zero entry, its sum, t of the last entry, the sum's part
# of entry 1.0, UNIT): midpoint g = UNIT * (A(t) + A(t + 1))
MID_BAND = 2.0 ** -20  # |v - s m'| within this of |s m'|: the stored midpoint decides (> twice the products' gap)
MIDS = {True: (127, 0, 11, 127, 20_000_000, F32(0.25e-7)), False: (-1, 1, 65, 255, 200_000_000, F32(0.025e-7))}


def mid_sums(g, signed: bool) -> np.ndarray:
    """A(t) + A(t + 1) for codes ``g`` (signed: 127..254) as the kernel's u32 arithmetic gives it."""
    base, zt, zs, top, one, _ = MIDS[signed]
    t = np.asarray(g, np.int64) - base
    e = np.floor(np.log2(np.maximum(t, 1))).astype(np.int64)
    p5 = 5 ** e
    a = p5 * (18 * t + 9 - (16 << e))
    s = np.where(t + 1 == (2 << e), a + 5 * p5 * ((4 << e) + 9), 2 * a + 18 * p5)
    return np.where(t == zt, zs, np.where(t == top, a + one, s))


def check_mids(signed: bool) -> int:
    """The largest distance in float32 steps between a "calc" midpoint (the sum rounded to float32 either way,
    times UNIT) and the stored one (:func:`rlx_gpu.core.quant.midpoints`), over the map's positive half."""
    g = np.arange(127 if signed else 0, 255)
    s = mid_sums(g, signed)
    assert s.max() < 2 ** 32
    want = quant.midpoints(8, signed)[g].view(np.int32).astype(np.int64)
    near = s.astype(F32)
    worst = 0
    for r in (near, np.where(near.astype(np.int64) > s, np.nextafter(near, F32(0)), near)):  # (u32 -> f32: to
        got = (r * MIDS[signed][5]).astype(F32).view(np.int32).astype(np.int64)  # nearest, or toward zero)
        worst = max(worst, int(np.abs(got - want).max()))
    return worst


def check_linear4(ulps: int = 96) -> int:
    """The 4-bit unsigned map's guess g = floor(16 x - 1) (clamped to 0..14) is the code or one below it for every
    float32 x within ``ulps`` steps of a midpoint or of a place where g changes, both signs, x within 2^-20 of
    v / s, 16 x - 1 rounded once or twice; and so is "lineari"'s round-to-nearest-even(16 x - 3/2), clamped.
    Returns the number of x checked."""
    mids = quant.midpoints(4, False).astype(np.float64)
    pts = np.concatenate([mids, (np.arange(17) + 1) / 16.0, [0.0, 2.0, 3.9]]).astype(F32).view(np.int32)
    near = np.unique((pts.astype(np.int64)[:, None] + np.arange(-ulps, ulps + 1)).reshape(-1))
    xs = near[near >= 0].astype(np.int32).view(F32)
    xs = np.concatenate([xs, -xs])
    x64 = xs.astype(np.float64)
    c_lo = np.searchsorted(mids, np.minimum(x64 * (1 - DELTA), x64 * (1 + DELTA)), side="left")
    c_hi = np.searchsorted(mids, np.maximum(x64 * (1 - DELTA), x64 * (1 + DELTA)), side="left")
    floors = [np.clip(y, 0, 14).astype(np.int64) for y in ((xs * F32(16)).astype(F32) - F32(1),
                                                            (x64 * 16 - 1).astype(F32))]
    rounds = [np.rint(np.clip(y, 0, 14)).astype(np.int64) for y in ((xs * F32(16)).astype(F32) - F32(1.5),
                                                                   (x64 * 16 - 1.5).astype(F32))]
    for g in floors + rounds:
        bad = (g < np.minimum(c_hi - 1, 14)) | (g > c_lo)
        assert not bad.any(), (float(xs[bad][0]), int(g[bad][0]), int(c_lo[bad][0]), int(c_hi[bad][0]))
    return xs.size
