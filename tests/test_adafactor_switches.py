"""Adafactor.RECIP (direction()'s row by a float32 reciprocal with an exact correction, no batch division of a single
matrix) and Optimizer.PTLOADS (a per-tensor pass's threads load 8 block partials before adding them, in the same
order): each the default's arithmetic, so params and states bit for bit against the switch off over several steps
(with a tensor absent on some steps), and RECIP against the NumPy twin (tests/helpers's bound). Adafactor.CSCALE
(v = R * (C / max(M, eps1)), the column factors divided once in the mean pass) rounds otherwise: against its own
twin (reference.Adafactor, AdafactorDivided with it off) within the bound, and its divisions word for word."""
import ml_dtypes
import numpy as np
import pytest

import rlx_gpu
from helpers import assert_same
from cases import CASES
from test_kernel_variants import _run, _same, _variant
from test_parity import test_parity_many_tensors as _parity_run

pytestmark = pytest.mark.gpu

# n = 41 and 164 (rows of a multiple of 4 and not): f32(e) * f32(1/n) truncates one below e / n for some of their
# elements (checked below), so a missing correction fails; batches of 40 and 20 rows; an unfactored tensor; and
# 2^20 rows of 2, past RECIP's bound (B * m < 2^20), which keeps the division.
RECIP_SHAPES = [(50, 41), (3, 40, 164), (2, 20, 7), (33, 188), 77, (1 << 20, 2)]


def _naive_rows_off(shape) -> int:
    """How many of a matrix's vec4s the reciprocal's truncated row alone gets wrong (float32 as on the GPU)."""
    n = shape[-1]
    e = np.arange(0, int(np.prod(shape)), 4, dtype=np.int64)
    return int(((e.astype(np.float32) * np.float32(1 / n)).astype(np.int64) != e // n).sum())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_adafactor_recip_rows_are_the_divisions_bits(dtype, device):
    """RECIP = True against False: the same bits in float32 and bfloat16 (16-bit params, pairs of vec4s)."""
    assert _naive_rows_off((50, 41)) > 0 and _naive_rows_off((3, 40, 164)) > 0  # (the correction is exercised)
    dt = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    rng = np.random.default_rng(3)
    params = {f"t{i}": rng.standard_normal(s).astype(dt) for i, s in enumerate(RECIP_SHAPES)}
    want_p, want_s = _run(_variant("Adafactor", {"RECIP": False}), params, {}, device, steps=3)
    got = _variant("Adafactor", {"RECIP": True})
    assert got.constants["RC"] == 1 and rlx_gpu.Adafactor.constants["RC"] == int(rlx_gpu.Adafactor.RECIP)
    got_p, got_s = _run(got, params, {}, device, steps=3)
    _same(got_p, want_p, True, f"RECIP {dtype}: param")
    for n in want_s:
        _same(got_s[n], want_s[n], True, f"RECIP {dtype}: state of {n}")


def test_adafactor_recip_is_the_twins_step(device):
    """RECIP = True against rlx_gpu.reference.Adafactor over three steps (every param and state within the bound)."""
    rng = np.random.default_rng(4)
    params = {f"t{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(RECIP_SHAPES[:5])}
    gpu, twin = _variant("Adafactor", {"RECIP": True})(params, device=device), rlx_gpu.reference.Adafactor(params)
    for _ in range(3):
        g = {n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items()}
        gpu.step(g)
        twin.step(g)
    assert_same(gpu, twin, "Adafactor RECIP")


def _scalars(opt) -> np.ndarray:
    """Every tensor's ``tensor_scalar`` record word (what the per-tensor pass stored), as raw bits."""
    rec = opt.record
    words = opt.device.read(opt._hyper, 0, opt._hyper.size, out=np.empty(opt._hyper.size // 4, np.uint32))
    return words.reshape(-1, rec.size)[:len(opt._names), rec.tensor.offset["tensor_scalar"]]


@pytest.mark.parametrize("name", ["Adafactor", "LAMB", "Mars"])
def test_per_tensor_batched_loads_are_the_one_by_one_bits(name, device):
    """PTLOADS = True against False with 64-thread workgroups (so a tensor of 822 blocks takes a round of 8 x 64
    partials and a remainder, one of 160 the remainder alone): every step's per-tensor scalars (the sums' results,
    as raw bits), params and states bit for bit. (A load dropped or repeated fails it; the 8 adds reversed did not
    on llvmpipe: the ulps they move in a thread's sum do not survive the tree and the sqrt in these scalars.)"""
    rng = np.random.default_rng(6)
    params = {"big": rng.standard_normal((700, 600)).astype(np.float32),
              "mid": rng.standard_normal(160 * 512).astype(np.float32), "b": rng.standard_normal(40).astype(np.float32)}
    got = {}
    for on in (False, True):
        opt = _variant(name, {"WG": 64, "EPT": 2, "PTLOADS": on})(params, device=device)
        steps, rg = [], np.random.default_rng(9)
        for _ in range(3):
            opt.step({n: (rg.standard_normal(p.shape) * 1e-2).astype(np.float32) for n, p in params.items()})
            steps.append(_scalars(opt))
        got[on] = steps, opt.read_params(), opt.state_dict()["state"]
    for k, (a, b) in enumerate(zip(got[True][0], got[False][0])):
        np.testing.assert_array_equal(a, b, err_msg=f"{name} PTLOADS: tensor scalars of step {k + 1}")
    _same(got[True][1], got[False][1], True, f"{name} PTLOADS: param")
    for n, st in got[False][2].items():
        _same({k: np.asarray(v) for k, v in got[True][2][n].items() if k != "step"},
              {k: np.asarray(v) for k, v in st.items() if k != "step"}, True, f"{name} PTLOADS: state of {n}")


def test_the_class_itself_runs_its_switches():
    """rlx_gpu.Adafactor's own modules take its FINISH and RECIP, as a subclass's do (the base class once kept
    FINISH 1 and RECIP 0 in its override constants while its attributes said 16 and True)."""
    sub = type("Sub", (rlx_gpu.Adafactor,), {})
    assert rlx_gpu.Adafactor.constants == sub.constants
    assert rlx_gpu.Adafactor.constants["FL"] == rlx_gpu.Adafactor.FINISH
    assert rlx_gpu.Adafactor.constants["RC"] == int(rlx_gpu.Adafactor.RECIP)
    assert rlx_gpu.Adafactor.passes == sub.passes


def test_adafactor_cscale_is_its_twins_step(device):
    """CSCALE = True (the default: the mean pass writes CN = C / max(M, eps1); direction() takes R * CN) against
    its spec, the twin with the same rounding (rlx_gpu.reference.Adafactor, whose CSCALE is on too), over three
    steps (every param and state within the bound); the class without it keeps torch's rounding and its spec
    (AdafactorDivided), over the same steps."""
    cls = _variant("Adafactor", {"CSCALE": True})
    assert cls.spec is rlx_gpu.reference.Adafactor and cls.constants["CS"] == 1
    assert rlx_gpu.Adafactor.spec is rlx_gpu.reference.Adafactor and rlx_gpu.Adafactor.constants["CS"] == 1
    off = _variant("Adafactor", {"CSCALE": False})
    assert off.spec is rlx_gpu.reference.adafactor.AdafactorDivided and off.constants["CS"] == 0
    assert rlx_gpu.reference.adafactor.AdafactorCScale.CSCALE and rlx_gpu.reference.Adafactor.CSCALE
    for c in (cls, off):
        _cscale_run(device, c)


def _cscale_run(device, cls):
    rng = np.random.default_rng(4)
    params = {f"t{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(RECIP_SHAPES[:5])}
    gpu, twin = cls(params, device=device), cls.spec(params)
    for _ in range(3):
        g = {n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items()}
        gpu.step(g)
        twin.step(g)
    assert_same(gpu, twin, f"Adafactor CSCALE={cls.CSCALE}")


def test_adafactor_cscale_factors_are_the_twins_division(device):
    """The CN words the mean pass leaves in aux, per factored tensor and batch, against NumPy's float32 C / max(M,
    eps1) of the same aux's C and M: bit for bit on a CPU adapter (IEEE division), elsewhere within 3 * 2^-23
    relatively (at least 3 ulps; WGSL's division bound is 2.5). (A CN of the wrong batch, an unclamped mean or a missed column fails it.)"""
    rng = np.random.default_rng(8)
    shapes = [(50, 41), (3, 40, 164), (2, 300, 8), 77]  # (2, 300, 8): two row-sum blocks a batch (M from RS)
    params = {f"t{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    opt = _variant("Adafactor", {"CSCALE": True})(params, device=device, eps=(1e-2, 1e-3))
    g = {n: (rng.standard_normal(p.shape) * (1e-2 if n in ("t0", "t2") else 1.0)).astype(np.float32)
         for n, p in params.items()}  # (t0's and t2's means of g*g about 1e-4: below eps1)
    opt.step(g)
    aux = opt.device.read(opt._aux, 0, opt._aux.size, out=np.empty(opt._aux.size // 4, np.float32))
    clamped = 0
    for t in np.flatnonzero(opt._fact):
        m, n, B, A = (int(opt._dims[k][t]) for k in ("m", "n", "B", "A"))
        C = aux[A + B * m:A + B * m + B * n].reshape(B, n)
        M = aux[A + 2 * B * m + B * n:A + 2 * B * m + B * n + B]
        cn0 = A + 2 * B * m + B * n + B + B * -(-m // opt.WG)
        got = aux[cn0:cn0 + B * n].reshape(B, n)
        rm = np.maximum(M, np.float32(1e-2))[:, None]
        clamped += int((M < 1e-2).sum())
        want = C / rm
        assert np.all(got != 0) and np.all(np.isfinite(got)), f"t{t}: CN not written"
        if device.info["type"] == "CPU":
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=f"CN of t{t}")
        else:
            np.testing.assert_allclose(got, want, rtol=3 * 2.0 ** -23, atol=0, err_msg=f"CN of t{t}")
    assert clamped > 0  # (the eps1 clamp exercised)


@pytest.mark.parametrize("opts", [o for g, _, o in CASES if g is rlx_gpu.Adafactor], ids=lambda o: str(o) or "defaults")
def test_adafactor_cscale_parity_many_tensors(opts, device):
    """test_parity.py's many-sizes run (12 steps, tensors dropped on some) with CSCALE on, against its twin."""
    cls = _variant("Adafactor", {"CSCALE": True})
    _parity_run(cls, cls.spec, opts, device)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_adafactor_rsqrt_is_its_twins_step(dtype, device):
    """RSQRT (off by default: the finish pass keeps RR = rsq(R), the mean pass rsq(CN); direction() takes min(RR
    CN', 1/eps1)) against its spec, reference.adafactor.AdafactorRsqrt, over four steps within the bound, float32
    and bfloat16 params (pairs of vec4s), rows of a multiple of 4 and not, batches, an unfactored tensor; grads with
    zero rows and a zero column (R = 0, C = 0: rsq's infinity clamped to 1/eps1, as torch's floor gives), and a
    tensor absent on a step. RSQRT without CSCALE is refused by name."""
    cls = _variant("Adafactor", {"RSQRT": True})
    assert cls.spec is rlx_gpu.reference.adafactor.AdafactorRsqrt and cls.constants["RQ"] == 1
    assert rlx_gpu.Adafactor.constants["RQ"] == 0 and rlx_gpu.Adafactor.spec is rlx_gpu.reference.Adafactor
    dt = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    rng = np.random.default_rng(11)
    shapes = [(50, 41), (3, 40, 164), (2, 20, 7), (33, 188), 77]
    params = {f"t{i}": rng.standard_normal(s).astype(dt) for i, s in enumerate(shapes)}
    gpu, twin = cls(params, device=device), cls.spec({n: p.astype(np.float32) for n, p in params.items()})
    for s in range(4):
        g = {n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items()}
        g["t0"][5:9] = 0  # (zero rows: R stays 0 on every step)
        g["t3"][:, 7] = 0  # (a zero column)
        if s == 2:
            del g["t1"]
        gpu.step({n: v.astype(dt) for n, v in g.items()})
        twin.step({n: v.astype(dt).astype(np.float32) for n, v in g.items()})
        if dtype == "bfloat16":  # the twin steps float32 params: the GPU's within bfloat16's rounding (2^-7
            #                        relatively, stochastic or nearest), then the twin goes on from the GPU's
            got = {n: v.astype(np.float32) for n, v in gpu.read_params().items()}
            for n, v in got.items():
                np.testing.assert_allclose(v, twin.params[n], rtol=2 ** -7, atol=1e-7, err_msg=f"{s} {n}")
            twin.params.update(got)
    assert_same(gpu, twin, f"Adafactor RSQRT {dtype}")
    with pytest.raises(ValueError, match="RSQRT needs CSCALE"):
        _variant("Adafactor", {"RSQRT": True, "CSCALE": False})(params, device=device)
