"""The code search in closed form (``Optimizer.QCLOSED``; rlx_gpu/core/qclosed.py, engine/qsearch.py) gives the codes
the guide-table search gives, bit for bit: its guess checked on the CPU for every float32 that matters, and both
searches' WGSL (the drivers' own functions, ``q_codes_s`` / ``q_codes_u``) run on the GPU over a sweep of values
and block words: every binade of v / absmax with dense mantissas, every midpoint times absmax and its neighbours
up to 3 ulps both ways, 0, -0, subnormals, +-inf, NaN, values past the map's ends; absmax words of every exponent
(subnormal, 0, FLT_MAX, flagged: a negated block, a block holding +inf). The optimizers' parity with the switch on:
tests/test_kernel_variants.py. Each closed form (engine/qsearch.FORMS) so: 8-bit's decade by comparisons, by log2, and that with the
midpoint computed, the least of the seven lines (min) and of two from a table by the exponent (binade), log for
four values at once (vlog); 4-bit's
constant bisection and the unsigned map's one comparison (linear)."""
import numpy as np
import pytest

from rlx_gpu.core import qclosed, quant
from rlx_gpu.engine.qcodegen import _maps, _search_fns
from rlx_gpu.runtime.qarena import header
from rlx_gpu.runtime.source import load_source
from helpers import run_main

F32 = np.float32


@pytest.mark.parametrize("signed", [True, False])
def test_guess_is_the_code_or_one_below(signed):
    """core/qclosed.check_guess: the 8-bit guess g is the code or one below it for every x near an event (a
    midpoint, a decade threshold, an integer of y), with y rounded both ways; and a guess moved by 0.3 code
    fails the check (the check can fail)."""
    assert qclosed.check_guess(signed) > 50_000
    low, slope, icpt = qclosed.decades(signed)
    orig = qclosed.decades
    try:
        qclosed.decades = lambda s: (low, slope, icpt + F32(0.3))
        with pytest.raises(AssertionError):
            qclosed.check_guess(signed)
    finally:
        qclosed.decades = orig


@pytest.mark.parametrize("signed", [True, False])
def test_log_forms_guess_within_their_bound(signed):
    """The "log" forms' y (core/qclosed.log_y, NumPy's log2/exp2) lies within a tenth of LOG_ERR of the exact line
    over the decades, 0 and past 1; every y within LOG_ERR of the line gives a guess one midpoint settles
    (check_guess with err), and one within 0.3 does not (the check can fail)."""
    x = np.concatenate([np.geomspace(1e-10, 2, 400_001), [0.0, 1e-45, 1e-38]]).astype(F32)
    x = np.concatenate([x, (10.0 ** np.arange(-7, 1)[:, None] * (1 + np.arange(-64, 65) * 2.0 ** -23)).ravel()])
    assert np.abs(qclosed.log_y(x, signed) - qclosed._line(x, signed)).max() < qclosed.LOG_ERR / 10
    assert qclosed.check_guess(signed, err=qclosed.LOG_ERR) > 50_000
    with pytest.raises(AssertionError):
        qclosed.check_guess(signed, err=0.3)


def _near_events(signed: bool, ulps: int = 96) -> np.ndarray:
    """Every non-negative float32 within ``ulps`` steps of an 8-bit map's event (core/qclosed._events)."""
    ev = qclosed._events(signed).view(np.int32).astype(np.int64)
    near = (ev[:, None] + np.arange(-ulps, ulps + 1)).reshape(-1)
    return near[near >= 0].astype(np.int32).view(F32)


@pytest.mark.parametrize("signed", [True, False])
def test_min_form_guess_within_its_bound(signed):
    """The "min" form's y (core/qclosed.min_y: the least of the seven lines, each multiply-add fused or not) lies
    within a tenth of MIN_ERR of the exact line over the decades, 0, past 1 and near every event; every y within
    MIN_ERR of the line gives a guess one midpoint settles (check_guess with err); and the least of the lines is
    the decade's line only because each is flatter than the one below: with a steeper last line the bound fails."""
    x = np.concatenate([np.geomspace(1e-10, 2, 400_001), [0.0, 1e-45, 1e-38]]).astype(F32)
    x = np.concatenate([x, (10.0 ** np.arange(-7, 1)[:, None] * (1 + np.arange(-64, 65) * 2.0 ** -23)).ravel()])
    x = np.concatenate([x, _near_events(signed)])
    for fused in (False, True):
        assert np.abs(qclosed.min_y(x, signed, fused) - qclosed._line(x, signed)).max() < qclosed.MIN_ERR / 10
    assert qclosed.check_guess(signed, err=qclosed.MIN_ERR) > 50_000
    low, slope, icpt = qclosed.decades(signed)
    orig = qclosed.decades
    try:
        qclosed.decades = lambda s: (low, np.append(slope[:6], slope[5] * F32(3)), icpt)
        assert np.abs(qclosed.min_y(x, signed) - qclosed._line(x, signed)).max() > 1
    finally:
        qclosed.decades = orig


@pytest.mark.parametrize("signed", [True, False])
def test_binade_form_is_the_min_forms_y(signed):
    """The "binade" form's y (core/qclosed.binade_y: two lines from a table by |x|'s exponent) is the "min" form's,
    bit for bit, both roundings, over the decades, 0, past 1 and near every event (so MIN_ERR's bound holds); a
    table row with the wrong pair of lines is caught."""
    x = np.concatenate([np.geomspace(1e-12, 4, 200_001), [0.0, 1e-45, 1e-38, 1e3]]).astype(F32)
    x = np.concatenate([x, _near_events(signed)])
    for fused in (False, True):
        np.testing.assert_array_equal(qclosed.binade_y(x, signed, fused), qclosed.min_y(x, signed, fused))
    orig, rows = qclosed.binades, qclosed.binades(signed).copy()
    k = int(np.nonzero(rows[:, 0] != rows[:, 2])[0][-1])  # (the top threshold's binade: its upper line dropped)
    rows[k, 2:] = rows[k, :2]
    try:
        qclosed.binades = lambda s: rows
        assert (qclosed.binade_y(x, signed) != qclosed.min_y(x, signed)).any()
    finally:
        qclosed.binades = orig


def test_linear_4bit_guess_is_the_code_or_one_below():
    """core/qclosed.check_linear4: the 4-bit unsigned map's guess floor(16 x - 1) is the code or one below it near
    every midpoint and every place it changes; its midpoints are (2k + 3) / 32 exactly, as the kernel computes."""
    assert qclosed.check_linear4() > 5_000
    k = np.arange(15, dtype=F32)
    np.testing.assert_array_equal(quant.midpoints(4, False), k * F32(0.0625) + F32(0.09375))


@pytest.mark.parametrize("signed", [True, False])
def test_calc_midpoints_are_the_stored_ones_within_two_steps(signed):
    """The "calc" form's midpoints (UNIT * an integer sum, core/qclosed.MIDS) are within 2 float32 steps of the
    stored ones, either rounding of the sum, so sc * it and sc * the stored one (each rounded once more) differ by
    less than half the kernel's band MID_BAND, relatively; and a wrong sum is caught."""
    k = qclosed.check_mids(signed)
    assert k <= 2 and 2 * (k * 2.0 ** -23 + 2 * 2.0 ** -24) < qclosed.MID_BAND
    orig = qclosed.mid_sums
    try:
        qclosed.mid_sums = lambda g, s: orig(g, s) + 1000 * (np.asarray(g) == 200)
        assert qclosed.check_mids(signed) > 2
    finally:
        qclosed.mid_sums = orig


def _module(bits: int, tag: str, closed: bool, form: str = "") -> str:
    """A module computing q_codes_<tag>(vals[i], words[i]) with the drivers' search (header read from ``h_q``)."""
    want = ("m",) if closed and bits == 4 else ("m", "t") if closed else ("m", "t", "g")
    return "\n".join([load_source("ieee.wgsl"), f"const QN: u32 = {2 ** bits}u;", f"const QT: u32 = {quant.GUESS_KEYS}u;",
                      "@group(0) @binding(0) var<storage, read_write> h_q: array<u32>;",
                      "@group(0) @binding(1) var<storage, read_write> vals: array<vec4<f32>>;",
                      "@group(0) @binding(2) var<storage, read_write> words: array<u32>;",
                      "@group(0) @binding(3) var<storage, read_write> codes: array<vec4<u32>>;",
                      *_maps(tag, "h", True, want), *_search_fns(tag, bits, closed, form),
                      "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>, "
                      "@builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) lid: u32) {",
                      "    let i = g.x + g.y * n.x * 64u;",
                      *([f"    q_load_y_{tag}(lid);", "    workgroupBarrier();"] if form == "binade" else []),
                      f"    if (i < arrayLength(&words)) {{ codes[i] = q_codes_{tag}(vals[i], words[i]); }}", "}"])


def _sweep(bits: int, signed: bool):
    """(values as rows of 4, absmax word per row): the module docstring's sweep."""
    rng = np.random.default_rng(7)
    scales = [F32(2.0 ** e) * F32(1 + rng.random()) for e in range(-149, 128, 3)]
    scales = np.array(scales + [0.0, 1.0, 1e-38, 1.2e-38, 3e38, np.finfo(F32).max, 2.0 ** -100, 2.0 ** 100,
                                1e-45, 2.0 ** -128], F32)
    mids = quant.midpoints(bits, signed)
    mant = np.linspace(1, 2, 48, endpoint=False)
    rel = np.concatenate([[0.0, 1.0, 1.5, -1.0, 2.0 ** -30], (2.0 ** np.arange(-30, 1)[:, None] * mant).ravel()])
    rel = np.concatenate([rel, -rel]).astype(F32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e-45, 1.1e-38, np.finfo(F32).max],
                       F32)
    vals, words = [], []
    for a in scales:
        sc = F32(1) if a == 0 else a
        with np.errstate(over="ignore", under="ignore"):
            at = (sc * mids).astype(F32)
            near = (at.view(np.int32)[:, None] + np.arange(-3, 4)).ravel().view(F32)
            v = np.concatenate([(sc * rel).astype(F32), near, -near, special, [sc, -sc]]).astype(F32)
            mixed = np.array([np.inf, 0.3, np.nan, 0.7, 0.01, -np.inf, -0.5, np.nan], F32) * sc  # (rows of normal
        v = np.concatenate([v, np.zeros(-v.size % 4, F32), mixed])  # values beside inf/NaN: vlog's fallback of four)
        w = np.full(v.size // 4, np.array(a, F32).view(np.uint32), np.uint32)
        w[1::2] |= quant.FLAG  # every other row: a negated block (signed), a block holding +inf (unsigned)
        vals.append(v.reshape(-1, 4))
        words.append(w)
    return np.concatenate(vals), np.concatenate(words)


def _codes(device, code: str, vals, words, h) -> np.ndarray:
    out = run_main(device, "qclosed-test", code, {"h_q": h, "vals": vals, "words": words}, {"codes": vals.nbytes},
                   -(-words.size // 64))
    return out["codes"].view(np.uint32)[:vals.size].reshape(-1, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("bits,form", [(8, "decade"), (8, "log"), (8, "calc"), (8, "min"), (8, "binade"),
                                       (8, "vlog"), (8, "vlogi"), (4, "bisect"), (4, "linear"),
                                       (4, "lineari")])
@pytest.mark.parametrize("signed", [True, False])
def test_closed_form_codes_are_the_searchs(bits, form, signed, device):
    """The closed form's codes equal the guide search's and the rule's count (core/quant.py's bisection) where the
    values and the products are normal floats and the block's scale lies inside SCALE_RANGE; past it (the closed
    form's fallback, the bisection on v and the scale) the closed form equals the rule too. The guide search may
    differ only outside the first set, on a GPU that flushes subnormals (the H200: 1 / absmax is subnormal for
    absmax >= 2^126, so the guide's v * (1 / absmax) is 0 there; llvmpipe keeps subnormals)."""
    tag = "s" if signed else "u"
    vals, words = _sweep(bits, signed)
    h = header(bits, signed)
    old = _codes(device, _module(bits, tag, False), vals, words, h)
    new = _codes(device, _module(bits, tag, True, form), vals, words, h)
    a = (words & ~quant.FLAG).view(F32)
    lo, hi = qclosed.SCALE_RANGE
    m = np.abs(vals)
    values_normal = ((m == 0) | (m >= np.finfo(F32).tiny) | ~np.isfinite(m)).all(axis=1)
    normal, big = values_normal & (a >= lo) & (a <= hi), values_normal & (a > hi)
    assert normal.sum() > words.size // 2 and big.sum() > 1000
    rule = _rule(vals, words, bits, signed)
    np.testing.assert_array_equal(new[normal | big], rule[normal | big])
    diff = np.nonzero((old != new).any(axis=1) & normal)[0]
    assert diff.size == 0, (f"{diff.size} of {words.size} rows differ, e.g. values {vals[diff[0]]} word "
                            f"{words[diff[0]]:#x}: guide {old[diff[0]]}, closed {new[diff[0]]}")
    assert vals.size > 300_000


def _rule(vals, words, bits: int, signed: bool) -> np.ndarray:
    """q_codes_<tag>'s codes by core/quant.py's rule (its bisection), per row of 4 values and its block word."""
    a = np.repeat((words & ~quant.FLAG).view(F32), 4)
    flag = np.repeat((words & quant.FLAG) != 0, 4)
    v = vals.reshape(-1)
    sc = np.where(a == 0, F32(1), a).astype(F32)
    c = quant._search(np.where(flag, -v, v) if signed else v, sc, bits, signed)
    if not signed:
        c = np.where(v > 0, np.maximum(c, 1), c) if bits == 8 else c
        c = np.where(flag, np.where(v == np.inf, 0, np.maximum(c, 1)), c)
    return c.reshape(-1, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("name,hyper", [("Adam", {"amsgrad": True}), ("Lion", {"lr": 1e-3}), ("SGD", {"momentum": 0.9}),
                                        ("RMSprop", {"centered": True, "momentum": 0.5})])
def test_every_quantizable_optimizer_takes_the_same_codes(name, hyper, bits, device):
    """The optimizers with quantized states that test_kernel_variants.py leaves out, with QCLOSED on and off: the
    same params, codes and absmax words after four steps (grads of mixed scales, a zero block, an exact zero)."""
    import rlx_gpu
    rng = np.random.default_rng(3)
    p0 = {"a": rng.standard_normal(3000).astype(F32), "b": rng.standard_normal((17, 31)).astype(F32)}
    got = []
    for closed in (False, True):
        cls = type(name, (getattr(rlx_gpu, name),), {"QCLOSED": closed})
        opt = cls(p0, **hyper, state_bits=bits, min_quantized_size=1, device=device)
        r = np.random.default_rng(4)
        for s in range(4):
            g = {k: (r.standard_normal(v.shape) * 10.0 ** r.integers(-8, 3, v.shape)).astype(F32) for k, v in p0.items()}
            g["a"][:256] = 0.0 if s == 1 else g["a"][:256]
            g["b"][0, 0] = 0.0
            opt.step(g)
        got.append((opt.read_params(), opt.state_dict()["state"]))
    for n in p0:
        np.testing.assert_array_equal(got[1][0][n].view(np.uint32), got[0][0][n].view(np.uint32), err_msg=n)
        for k, v in got[0][1][n].items():
            np.testing.assert_array_equal(np.asarray(got[1][1][n][k]), np.asarray(v), err_msg=f"{name} {n} {k}")
