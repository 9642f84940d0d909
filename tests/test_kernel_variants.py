"""The drivers' variants (engine/drivers.py: WIDE, FULL, SUBGROUPS, VPACK, QDIRECT, QCLOSED on the Optimizer) and
Adafactor's MERGE and ROWCOLS against the plain driver: every variant does the same float32 operations on every
element, so the elementwise optimizers' params and states agree bit for bit; the quantized drivers (workgroup atomics or subgroup shuffles for the block maxima) give
the same codes. The reducing optimizers' (LAMB, Mars, Adafactor) sums are compared within the suite's bound
(cases.RTOL and ATOL) for every variant but VPACK: with subgroups or pairs of vec4s a thread they are taken in
another order, and FULL's unmasked loop, summing in the same order, is compiled differently (on the H200 LAMB's
float32 norms differ in the last bit, on llvmpipe not at all; with the masks put back into FULL's loop they still
differ: benchmarks/h200_harden3.py, logs/h200_2026-12-01c). Each is deterministic: the same
variant run twice gives the same bits (test_reductions_are_reproducible: fixed trees over workgroup memory and a
fixed order over the blocks' partials, no float atomics).
Sizes: around a vec4, a pair of vec4s, a quantization block, an engine block (2048) and several of a workgroup's
eight engine blocks, so partial blocks fall in later rounds of a workgroup too."""
import ml_dtypes
import numpy as np
import pytest

import rlx_gpu
from cases import ATOL, RTOL

pytestmark = pytest.mark.gpu

SIZES = [1, 5, 8, 9, (3, 7), 255, 257, 2049, 2600, (65, 64), 4097, 9000, 16385]
OFF = dict(WIDE=False, FULL=False, SUBGROUPS=False, VPACK=False, QDIRECT=False, QCLOSED=False, F16ROUND=False,
           QFULL=False, QHOIST=False, QREDUX=False, QBTAB=False)
VARIANTS = [dict(OFF, WIDE=True), dict(OFF, FULL=True), dict(OFF, VPACK=True), dict(OFF, SUBGROUPS=True),
            dict(OFF, QDIRECT=True), dict(OFF, SUBGROUPS=True, QDIRECT=True),
            dict(WIDE=True, FULL=True, SUBGROUPS=True, VPACK=True, QDIRECT=True, QCLOSED=True, F16ROUND=True), {}]  # ({}: defaults)
# the quantized buckets' own, in two lists. QDRIVER, on every precision (the params' loads and stores sit in the
# driver's loop): the atomics and the subgroup driver, each switch of the subgroup driver off from the defaults
# and alone on the plain driver, four vec4s a thread (EPT = 4, or QEPT = 4: the quantized buckets' kernels alone,
# in workgroups of half the threads, the engine block kept), the maps read from the state buffers (QDIRECT), the
# guide search (QCLOSED off). QSEARCH, on float32 params (the code search reads only float32 states, so another
# precision adds a compile and nothing else): engine/qsearch.FORMS' other closed forms in both drivers.
# (Every entry is a distinct module: a compile of several seconds on llvmpipe; duplicates of the defaults left out)
QDRIVER = [dict(OFF, QCLOSED=True), dict(OFF, SUBGROUPS=True, QCLOSED=True), {"EPT": 4},
           dict(OFF, QCLOSED=True, QDIRECT=True, EPT=4), {"QEPT": 4}, dict(OFF, QEPT=4),
           dict(OFF, SUBGROUPS=True, QCLOSED=True, QEPT=4),
           dict(OFF, SUBGROUPS=True, QCLOSED=True, QFULL=True), dict(OFF, SUBGROUPS=True, QCLOSED=True, QHOIST=True),
           dict(OFF, SUBGROUPS=True, QCLOSED=True, QREDUX=True), dict(OFF, SUBGROUPS=True, QCLOSED=True, QBTAB=True),
           {"QFULL": False}, {"QHOIST": False}, {"QREDUX": False}, {"QBTAB": True}]
QSEARCH = [{"QFORM8": "decade", "QFORM4": "bisect"}, dict(OFF, QCLOSED=True, QFORM8="log", QFORM4="linear"),
           {"QFORM8": "calc"}, dict(OFF, SUBGROUPS=True, QCLOSED=True, QFORM8="calc", QFORM4="linear", EPT=4),
           dict(OFF, SUBGROUPS=True, QFULL=True, QCLOSED=True, QFORM8="min"), {"QFORM8": "binade", "QEPT": 4},
           dict(OFF, QCLOSED=True, QFORM8="binade"), {"QFORM8": "vlogi", "QFORM4": "lineari"},
           dict(OFF, SUBGROUPS=True, QCLOSED=True, QFORM8="vlogi", QFORM4="lineari", QEPT=4)]
# (class, hyperparameters, options): elementwise ones bit for bit, reducing ones within the bound
CASES = [("AdamW", {"amsgrad": True}, {}), ("SGD", {"momentum": 0.9, "nesterov": True}, {}), ("Lion", {}, {}),
         ("RMSprop", {"centered": True, "momentum": 0.5}, {}), ("LAMB", {}, {}), ("Mars", {}, {}),
         ("Adafactor", {}, {}), ("AdamW", {}, {"state_bits": 8}), ("AdamW", {"amsgrad": True}, {"state_bits": 4}),
         ("SGD", {"momentum": 0.9}, {"state_bits": 8})]
DTYPES = {"float32": {}, "bfloat16": {}, "bfloat16 + master": {"master_weights": True},
          "float16": {}, "bfloat16, stochastic": {"stochastic_rounding": True, "rounding_seed": 3},
          "float16, bfloat16 states": {"state_dtype": "bfloat16"}}
REDUCING = {"LAMB", "Mars", "Adafactor"}
ULPS = 4


def _variant(name: str, switches: dict):
    return type(name, (getattr(rlx_gpu, name),), dict(switches))


def _run(cls, params, opts, device, steps=4):
    opt = cls(params, **opts, device=device)
    rng = np.random.default_rng(11)
    for s in range(steps):  # (a tensor without a grad on some steps: its state buffers are made later)
        grads = {n: rng.standard_normal(p.shape).astype(p.dtype) for i, (n, p) in enumerate(params.items())
                 if (i + s) % 4 != 1}
        # (quantized rows: a grads' multiplier other than 1 on one step, read once per workgroup with QHOIST)
        opt.step(grads, **({"grad_mul": 0.75} if s == 2 and opts.get("state_bits") else {}))
    sd = opt.state_dict()["state"]
    return opt.read_params(), {n: {k: np.asarray(v) for k, v in st.items() if k != "step"} for n, st in sd.items()}


def _params(dtype: str):
    dt = {"float32": np.float32, "float16": np.float16}.get(dtype.split(",")[0].split(" +")[0], ml_dtypes.bfloat16)
    rng = np.random.default_rng(5)
    return {f"t{i}": rng.standard_normal(s).astype(dt) for i, s in enumerate(SIZES)}


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    key = lambda x: np.where(x & 0x8000, -(x & 0x7FFF), x)  # noqa: E731 (sign-magnitude bits of 16-bit values)
    return np.abs(key(a.view(np.uint16).astype(np.int64)) - key(b.view(np.uint16).astype(np.int64)))


def _same(got, want, exact: bool, what: str):
    """Bit for bit, or (sums in another order) float32 values within the suite's bound and 16-bit ones within
    ULPS units in the last place (test_mixed_precision.py's bounds for the reducing optimizers)."""
    for n in want:
        a, b = np.asarray(got[n]), np.asarray(want[n])
        if exact:
            np.testing.assert_array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8), err_msg=f"{what} {n}")
            continue
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        bound = RTOL * np.abs(b32) + ATOL * max(1.0, float(np.abs(b32).max(initial=0)))
        near = np.abs(a32 - b32) <= bound
        if a.dtype.itemsize == 2:
            near |= _ulps(a, b) <= ULPS
        assert near.all(), f"{what} {n}: {int((~near).sum())} of {near.size} apart, e.g. {a32[~near][:3]} vs {b32[~near][:3]}"


def _id(v) -> str:
    return ",".join(f"{k}={x}" for k, x in v.items()) or "-" if isinstance(v, dict) else str(v)


# the quantized rows' precisions: SGD's one signed state adds nothing to AdamW's rows in the params' code but the
# state count, so float32 and one 16-bit precision; state_dtype does not apply to quantized states
QDTYPES = {"AdamW": [d for d in DTYPES if "states" not in d], "SGD": ["float32", "bfloat16"]}
ROWS = [(*c, d, "variants") for d in DTYPES for c in CASES if not c[2].get("state_bits")] + [
    (*c, d, "driver") for c in CASES if c[2].get("state_bits") for d in QDTYPES[c[0]]] + [
    (*c, "float32", "search") for c in CASES if c[2].get("state_bits")]


@pytest.mark.parametrize("name,hyper,opts,dtype,which", ROWS, ids=_id)
def test_variants_match_the_plain_driver(name, hyper, opts, dtype, which, device):
    params = _params(dtype)
    kw = dict(hyper, **opts, **DTYPES[dtype], min_quantized_size=1) if opts else dict(hyper, **DTYPES[dtype])
    want_p, want_s = _run(_variant(name, OFF), params, kw, device)
    for sw in {"variants": VARIANTS, "driver": VARIANTS + QDRIVER, "search": QSEARCH}[which]:
        if sw.get("SUBGROUPS") and "subgroups" not in device.features:
            continue
        got_p, got_s = _run(_variant(name, sw), params, kw, device)
        exact = name not in REDUCING or not any(sw.get(k, True) for k in ("SUBGROUPS", "WIDE", "FULL"))
        what = f"{name} {dtype} {sw}"
        _same(got_p, want_p, exact, what + ": param")
        for n in want_s:
            _same(got_s[n], want_s[n], exact, what + f": state of {n}")


@pytest.mark.parametrize("name", sorted(REDUCING))
def test_reductions_are_reproducible(name, device):
    """The reducing optimizers give the same bits run after run, in every variant, over many workgroups (a tensor
    of 150 engine blocks: about 19 workgroups' partials summed per tensor) and in bfloat16 with master weights."""
    rng = np.random.default_rng(7)
    for dt, extra in ((np.float32, {}), (ml_dtypes.bfloat16, {"master_weights": True})):
        params = {"big": rng.standard_normal((600, 512)).astype(dt), "odd": rng.standard_normal(2600).astype(dt)}
        for sw in [OFF] + VARIANTS:
            if sw.get("SUBGROUPS") and "subgroups" not in device.features:
                continue
            (p1, s1), (p2, s2) = (_run(_variant(name, sw), params, extra, device, steps=3) for _ in range(2))
            _same(p2, p1, True, f"{name} {sw} rerun: param")
            for n in s1:
                _same(s2[n], s1[n], True, f"{name} {sw} rerun: state of {n}")


# float16 states; grads whose moments are float16 subnormals (1e-4: v ~ 1e-11), ordinary, and past float16's
# range (3e3: v up to ~1e5, stored as inf): where round_state's hardware and integer roundings could differ
@pytest.mark.parametrize("extra", [{}, {"master_weights": True}, {"weight_decay": 0.0, "use_nvlamb": True}], ids=_id)
def test_f16round_keeps_lamb_bits(extra, device):
    """LAMB.F16ROUND (float16 states: round_state, the moments as the apply pass re-reads them, by the hardware's
    pack2x16float with the overflow guarded, not integer rounding): the same bits as without it, every param and
    state over steps with subnormal, ordinary and overflowing moments, with the other switches as default and off
    (the reduction order is theirs)."""
    params = _params("float16")
    for base in ({}, OFF):
        outs = []
        for on in (False, True):
            opt = _variant("LAMB", dict(base, F16ROUND=on))(params, **extra, state_dtype="float16",
                                                            clip_grad_norm=None, device=device)
            assert all(("pack2x16float" in opt._module(b)) == on for b in opt.buckets)  # (the variant runs)
            rng = np.random.default_rng(2)
            for scale in (1e-4, 1.0, 3e3, 1.0):
                opt.step({n: (rng.standard_normal(p.shape) * scale).astype(np.float16) for n, p in params.items()})
            sd = opt.state_dict()["state"]
            outs.append((opt.read_params(), {n: {k: np.asarray(v) for k, v in st.items() if k != "step"}
                                             for n, st in sd.items()}))
        (want_p, want_s), (got_p, got_s) = outs
        assert any(np.isinf(st["exp_avg_sq"]).any() for st in want_s.values())  # (the overflow was reached)
        _same(got_p, want_p, True, f"F16ROUND {base}: param")
        for n in want_s:
            _same(got_s[n], want_s[n], True, f"F16ROUND {base}: state of {n}")


def test_variants_are_what_the_device_offers(device):
    """The defaults: pairs of vec4s in buckets with 16-bit arenas only, subgroups only where the device has them."""
    p = {"a": np.zeros(10, np.float32), "b": np.zeros(10, ml_dtypes.bfloat16)}
    opt = rlx_gpu.AdamW(p, device=device)
    emits = {b.sig.param.name: opt._emit(b) for b in opt.buckets}
    assert not emits["float32"].wide and emits["bfloat16"].wide
    assert emits["float32"].subgroups == ("subgroups" in device.features)
    assert emits["float32"].directive == (emits["float32"].subgroups and device.implementation == "dawn")
    q = rlx_gpu.AdamW({"a": np.zeros(300, np.float32)}, state_bits=8, min_quantized_size=1, device=device)
    assert not q._emit(q.buckets[0]).wide  # (the quantized drivers take pairs themselves where they use subgroups)


def test_switches_by_precision(device):
    """The per-precision defaults (the H200 run's choices): pairs of vec4s in bfloat16 buckets, not in float16 ones
    (SGD's and Mars's keep them there; SGD's drop them with master copies; Lion's nowhere); a misspelt key is an
    error naming the switch."""
    p = {"a": np.zeros(10, np.float32), "b": np.zeros(10, ml_dtypes.bfloat16), "c": np.zeros(10, np.float16)}
    wide = lambda o: {b.sig.precision: o._emit(b).wide for b in o.buckets}  # noqa: E731
    assert wide(rlx_gpu.AdamW(p, device=device)) == {"float32": False, "bfloat16": True, "float16": False}
    assert wide(rlx_gpu.SGD(p, momentum=0.9, device=device)) == {"float32": False, "bfloat16": True, "float16": True}
    assert wide(rlx_gpu.Lion(p, device=device)) == {"float32": False, "bfloat16": False, "float16": False}
    m = rlx_gpu.SGD(p, momentum=0.9, master_weights=True, device=device)
    assert wide(m) == {"float32": False, "bfloat16+master": False, "float16+master": True}
    lamb = rlx_gpu.LAMB(p, device=device)
    assert not any(lamb._emit(b).vpack for b in lamb.buckets)
    with pytest.raises(ValueError, match=r"AdamW.WIDE: unknown precision keys \['bf16'\]"):
        _variant("AdamW", {"WIDE": {"bf16": False}})(p, device=device).step({n: np.ones_like(v) for n, v in p.items()})


def test_quantized_switches_by_state_width(device):
    """QCLOSED by state width (both widths on, 8-bit by QFORM8 "vlog" (PERF_NOTES 80), 4-bit unsigned by QFORM4
    "linear" (PERF_NOTES 64)); a width not named is off; an unknown width is an error naming the switch, and so is
    an unknown 8-bit form (QFORM8), changing nothing."""
    p = {"a": np.zeros(3000, np.float32)}

    def closed(bits, cls=rlx_gpu.AdamW):
        o = cls(p, device=device, **({"state_bits": bits, "min_quantized_size": 1} if bits else {}))
        return o._emit(o.buckets[0]).qclosed
    assert rlx_gpu.AdamW.QCLOSED == {4: True, 8: True} and closed(4) and closed(8) and not closed(0)
    assert closed(8, _variant("AdamW", {"QCLOSED": {8: True}})) and not closed(4, _variant("AdamW", {"QCLOSED": {8: True}}))
    with pytest.raises(ValueError, match=r"AdamW.QCLOSED: unknown state widths \[2\]"):
        closed(8, _variant("AdamW", {"QCLOSED": {2: True}}))
    assert (rlx_gpu.AdamW.QFORM8, rlx_gpu.AdamW.QFORM4) == ("vlog", "linear")
    bad = _variant("AdamW", {"QCLOSED": {8: True}, "QFORM8": "nope"})(p, state_bits=8, min_quantized_size=1,
                                                                      device=device)
    with pytest.raises(ValueError, match=r"QFORM8: unknown form 'nope'; expected one of \['decade', 'log', 'calc', 'min', 'binade', 'vlog', 'vlogi'\]"):
        bad.step({"a": np.ones(3000, np.float32)})
    np.testing.assert_array_equal(bad.read_params()["a"], p["a"])  # (nothing changed)
    bad4 = _variant("AdamW", {"QFORM4": "decade"})(p, state_bits=4, min_quantized_size=1, device=device)
    with pytest.raises(ValueError, match=r"QFORM4: unknown form 'decade'; expected one of \['bisect', 'linear', 'lineari'\]"):
        bad4.step({"a": np.ones(3000, np.float32)})


@pytest.mark.parametrize("opts,dtype", [({"state_bits": 8}, "bfloat16"), ({"state_bits": 4, "amsgrad": True}, "float32"),
                                        ({}, "bfloat16 + master")], ids=_id)
def test_four_vec4s_a_thread_match_the_plain_driver(opts, dtype, device):
    """EPT = 4 (the variants benchmark's ``ept4``) with the default switches: the same bits as the plain driver."""
    params = _params(dtype)
    kw = dict(opts, **DTYPES[dtype], **({"min_quantized_size": 1} if opts else {}))
    want_p, want_s = _run(_variant("AdamW", OFF), params, kw, device)
    got_p, got_s = _run(type("AdamW", (rlx_gpu.AdamW,), {"EPT": 4}), params, kw, device)
    _same(got_p, want_p, True, f"EPT 4 {opts} {dtype}: param")
    for n in want_s:
        _same(got_s[n], want_s[n], True, f"EPT 4 {opts} {dtype}: state of {n}")


@pytest.mark.parametrize("switches", [OFF, {}], ids=["off", "default"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16 + master", "float16"])
def test_adafactor_merged_passes_are_the_split_passes_bits(switches, dtype, device):
    """Adafactor.MERGE (RMS(p)'s block sums taken by update_norm, no stats pass) and ROWCOLS (rows and cols in one
    dispatch), each and both, against both off: the same sums in the same order, so params and states bit for
    bit, with the drivers' switches off and at their defaults."""
    params = _params(dtype)
    want_p, want_s = _run(_variant("Adafactor", dict(switches, MERGE=False, ROWCOLS=False)), params, DTYPES[dtype],
                          device)
    for merge, rowcols in ((True, False), (False, True), (True, True)):
        got = _variant("Adafactor", dict(switches, MERGE=merge, ROWCOLS=rowcols))
        names = [p.entry for p in got.passes]
        assert ("stats" in names) != merge and ("rowcols" in names) == rowcols and ("rows" in names) != rowcols
        got_p, got_s = _run(got, params, DTYPES[dtype], device)
        what = f"MERGE={merge} ROWCOLS={rowcols} {dtype}"
        _same(got_p, want_p, True, f"{what}: param")
        for n in want_s:
            _same(got_s[n], want_s[n], True, f"{what}: state of {n}")


def test_qept_that_does_not_fit_the_block_is_refused(device):
    """QEPT must split the engine block into workgroups of a multiple of 64 threads, in pairs of vec4s: otherwise
    the step is refused naming QEPT, and the params are unchanged."""
    p0 = np.arange(3000, dtype=np.float32)
    for bad in (3, 6, 16, True):
        opt = _variant("AdamW", {"QEPT": bad})({"a": p0}, state_bits=8, min_quantized_size=1, device=device)
        with pytest.raises(ValueError, match="AdamW.QEPT must be None or an even int"):
            opt.step({"a": np.ones(3000, np.float32)})
        np.testing.assert_array_equal(opt.read_params()["a"], p0)


TALL = [(2700, 3), (2, 1100, 8), (2100, 12), (65, 64), 40]  # 22, 9, 17 and 1 row tiles (RT = 128 rows) a batch


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_adafactor_finish_loads_are_the_one_by_one_bits(dtype, device):
    """Adafactor.FINISH = 8 or 16 (the finish pass loads that many column partials before adding them, in the same
    order) against 1 (one at a time) on matrices of 9-22 row tiles, so whole batches and the remainder both run:
    params and states bit for bit over several steps; FINISH = 1 against the NumPy twin (tests/helpers's bound)."""
    from helpers import assert_same
    dt = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    rng = np.random.default_rng(7)
    params = {f"t{i}": rng.standard_normal(s).astype(dt) for i, s in enumerate(TALL)}
    want_p, want_s = _run(_variant("Adafactor", {"FINISH": 1}), params, {}, device)
    for fl in (8, 16):
        got_p, got_s = _run(_variant("Adafactor", {"FINISH": fl}), params, {}, device)
        _same(got_p, want_p, True, f"FINISH={fl} {dtype}: param")
        for n in want_s:
            _same(got_s[n], want_s[n], True, f"FINISH={fl} {dtype}: state of {n}")
    if dtype == "float32":
        gpu, twin = _variant("Adafactor", {"FINISH": 16})(params, device=device), rlx_gpu.reference.Adafactor(params)
        for _ in range(3):
            g = {n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items()}
            gpu.step(g)
            twin.step(g)
        assert_same(gpu, twin, "Adafactor FINISH=16")


def test_adafactor_finish_outside_its_choices_is_refused(device):
    """FINISH must be 1, 8 or 16: otherwise the optimizer is refused at construction, naming FINISH."""
    for bad in (2, 4, True, 32):
        with pytest.raises(ValueError, match=r"Adafactor.FINISH must be 1, 8 or 16"):
            _variant("Adafactor", {"FINISH": bad})({"w": np.ones((300, 4), np.float32)}, device=device)
