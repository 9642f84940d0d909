"""float16 and bfloat16 parameters: the GPU against the twin for every optimizer x {float16, bfloat16} x {master
weights on/off} x {state dtype} on awkward sizes, stochastic rounding (bit for bit, and unbiased), master weights
against the float32 optimizer, the float16 loads and stores with and without shader-f16.

Tolerances: on the CPU adapter the elementwise optimizers agree bit for bit (the kernels do the twin's float32
operations and round at the store with the twin's integer rounding). Elsewhere, and for the optimizers whose
step includes a reduction (LAMB, MARS, Adafactor: sums in another order), a stored 16-bit value may differ by
``ULPS`` units in its last place, where the float32 value before rounding differs in its last bits, or, near zero,
by the suite's absolute bound (cases.ATOL times the tensor's scale); float32 values (master copies, float32 states)
keep the suite's bound (cases.RTOL/ATOL; bit for bit on the CPU adapter for the elementwise optimizers). A
trajectory in 16-bit states is quantised: where a GPU's FMA moves the float32 value by an ulp, the stored value may
round the other way, and a later sign (Lion), clamp (Sophia-H) or a mix that cancels near zero (QHAdamW, MARS)
turns that into a larger step (a float32 master copy follows it). So for those (``DIVERGING``), on adapters
other than the CPU one, at most ``DIVERGED`` of a test's elements (over all its tensors, 16-bit or float32) may lie
outside the bound, by any amount (NaNs must still match); for every other optimizer, and on the CPU adapter, none."""
import numpy as np
import pytest

import rlx_gpu
from cases import ATOL, RTOL, TABLE, case_id
from optimizer_db import DB
from rlx_gpu.core.lowp import BF16, F16, round_stochastic

pytestmark = pytest.mark.gpu
REDUCING = {r.name for r in DB if r.reduces}  # (tests/optimizer_db.py)
ULPS = {n: 4 for n in REDUCING}  # reductions in another order; elsewhere (a GPU that contracts FMAs) 2
ULPS_DEFAULT = 2
DIVERGED = 0.01  # the fraction of a test's elements (16-bit or float32) allowed outside the bound off the CPU adapter,
# for the optimizers whose step turns a last-bit difference into a larger one: a sign (Lion), a clamp (Sophia-H),
# mixes of moment and grad that cancel near zero (QHAdamW, MARS): on the H200 these failed without it. LAMB (a
# trust ratio of two norms) is in the set because after its float16 fix it was run on the H200 only with it.
DIVERGING = {r.name for r in DB if r.diverging}
SIZES = [1, 3, 4, 5, 7, 8, 9, (5, 7), 2047, 2049, 4097]
DT = {"bfloat16": BF16, "float16": F16}


def exact(device) -> bool:
    return device.info["type"] == "CPU"


def ulp_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between two 16-bit arrays of one dtype (sign-magnitude bits)."""
    def key(x):
        u = x.view(np.uint16).astype(np.int64)
        return np.where(u & 0x8000, -(u & 0x7FFF), u)
    return np.abs(key(a) - key(b))


class Typed:
    """Compares stored values as the tolerances above say; ``done()`` checks the diverged fraction."""

    def __init__(self, bitwise, ulps=ULPS_DEFAULT, diverged=0.0):
        self.bitwise, self.ulps, self.diverged = bitwise, ulps, diverged
        self.out, self.total, self.worst = 0, 0, ""

    def __call__(self, got, want, msg):
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == want.dtype, f"{msg}: dtype {got.dtype} vs {want.dtype}"
        if self.bitwise:
            np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8),
                                          err_msg=msg)
        elif got.dtype.itemsize == 2:
            nan = np.isnan(want.astype(np.float32))
            assert (np.isnan(got.astype(np.float32)) == nan).all(), msg
            g32, w32 = got[~nan].astype(np.float32), want[~nan].astype(np.float32)
            # near zero (a result that cancels to a tiny value) the float32 value's last bits span many 16-bit
            # ulps: there the suite's absolute floor applies, as for float32 values
            near = np.abs(g32 - w32) <= ATOL * max(1.0, float(np.abs(w32).max(initial=0.0)))
            d = np.where(near, 0, ulp_diff(got[~nan], want[~nan]))
            self.out += int((d > self.ulps).sum())
            self.total += d.size
            if d.size and d.max() > self.ulps:
                self.worst = f"{msg}: {d.max()} ulps apart"
        else:
            assert (np.isnan(got) == np.isnan(want)).all(), msg
            scale = max(1.0, float(np.abs(want).max(initial=0.0)))
            bad = ~np.isnan(want) & (np.abs(got - want) > RTOL * np.abs(want) + ATOL * scale)
            self.out += int(bad.sum())
            self.total += want.size
            if bad.any():
                i = np.flatnonzero(bad.reshape(-1))[0]
                self.worst = f"{msg}: {got.reshape(-1)[i]} vs {want.reshape(-1)[i]} at {i}"

    def done(self):
        assert self.out <= self.diverged * self.total, \
            f"{self.out} of {self.total} elements beyond the bound ({self.ulps} ulps; worst: {self.worst})"


def checker(device, name) -> Typed:
    """The comparison the tolerances above give optimizer ``name`` on ``device``."""
    return Typed(exact(device) and name not in REDUCING, ULPS.get(name, ULPS_DEFAULT),
                 0.0 if exact(device) or name not in DIVERGING else DIVERGED)


def assert_close_typed(got, want, msg, bitwise, ulps=ULPS_DEFAULT):
    check = Typed(bitwise, ulps)
    check(got, want, msg)
    check.done()


def params_of(dtype, seed):
    rng = np.random.default_rng(seed)
    return {f"t{i}": rng.standard_normal(s).astype(np.float32).astype(DT[dtype].np) for i, s in enumerate(SIZES)}


def grads_of(params, rng, dtype):
    return {n: rng.standard_normal(p.shape).astype(np.float32).astype(DT[dtype].np) for n, p in params.items()}


def run(gpu, twin, params, dtype, steps=8, sophia=False):
    rng = np.random.default_rng(5)
    for s in range(steps):
        g = grads_of(params, rng, dtype)
        if s % 3 == 2:
            del g["t1"]  # a tensor without a grad: nothing of it moves
        for o in (gpu, twin):
            if sophia and s % 2 == 0:
                o.update_hessian({n: np.abs(v.astype(np.float32)).astype(v.dtype) for n, v in g.items()})
            o.step(g)


CONFIGS = [(dtype, master, state) for dtype in ("bfloat16", "float16") for master in (False, True)
           for state in (("float32", dtype) if not master else ("float32",))]


@pytest.mark.parametrize("dtype,master,state", CONFIGS, ids=lambda v: str(v))
@pytest.mark.parametrize("gpu_cls,twin_cls,opts", [(g, t, sets[0]) for g, t, sets, _ in TABLE], ids=case_id)
def test_gpu_matches_twin(gpu_cls, twin_cls, opts, dtype, master, state, device):
    kw = dict(opts, master_weights=master, state_dtype=state)
    params = params_of(dtype, 1)
    gpu, twin = gpu_cls(params, **kw, device=device), twin_cls(params, **kw)
    run(gpu, twin, params, dtype, sophia=gpu_cls is rlx_gpu.SophiaH)
    name = gpu_cls.__name__
    check = checker(device, name)
    for n in params:
        check(gpu.params[n].numpy(), twin.params[n], f"{gpu_cls.__name__} param {n}")
    gs, ts = gpu.state_dict()["state"], twin.state_dict()["state"]
    assert gs.keys() == ts.keys()
    for n, st in ts.items():
        assert gs[n].keys() == st.keys(), (n, sorted(gs[n]), sorted(st))
        for k, v in st.items():
            if k != "step":
                check(gs[n][k], v, f"{gpu_cls.__name__} {k} of {n}")
            else:
                assert gs[n][k] == v
    check.done()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("cls_name", ["AdamW", "SGD", "Lion", "LAMB"])
def test_stochastic_rounding_matches_twin(cls_name, dtype, device):
    params = params_of(dtype, 2)
    kw = {"stochastic_rounding": True, "rounding_seed": 12345, "lr": 1e-2}
    gpu = getattr(rlx_gpu, cls_name)(params, **kw, device=device)
    twin = getattr(rlx_gpu.reference, cls_name)(params, **kw)
    run(gpu, twin, params, dtype)
    check = checker(device, cls_name)
    for n in params:
        check(gpu.params[n].numpy(), twin.params[n], f"SR {cls_name} {n}")
    check.done()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_stochastic_rounding_is_unbiased(dtype, device):
    """One SGD step p - lr*g lands between two 16-bit neighbours; over 10^6 elements the mean rounding error of the
    stored values is within 3 standard errors of 0 (round to nearest even is far outside it: it is biased)."""
    n = 1_000_000
    rng = np.random.default_rng(7)
    p0 = rng.uniform(1.0, 2.0, n).astype(np.float32).astype(DT[dtype].np)
    g = np.full(n, 1.0 / 3.0, np.float32)  # (1/3 * lr: between neighbours, never on one)
    opt = rlx_gpu.SGD({"w": p0}, lr=1e-3, stochastic_rounding=True, grad_dtype="float32", device=device)
    opt.step({"w": g})
    exact_f32 = p0.astype(np.float32) - np.float32(1e-3) * g
    err = opt.params["w"].numpy().astype(np.float64) - exact_f32.astype(np.float64)
    sem = err.std() / np.sqrt(n)
    assert abs(err.mean()) <= 3 * sem, (err.mean(), sem)
    rne = exact_f32.astype(DT[dtype].np).astype(np.float64) - exact_f32
    assert abs(rne.mean()) > 3 * sem  # the test can tell a biased rounding from an unbiased one
    # and on the host the same bits come from the twin's rounding
    from rlx_gpu.core.lowp import element_bits, name_hash, step_key
    twin = round_stochastic(exact_f32, DT[dtype], element_bits(step_key(0, 1, name_hash("w")), n))
    if exact(device):
        np.testing.assert_array_equal(opt.params["w"].numpy().view(np.uint16), twin.view(np.uint16))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_stochastic_rounding_never_rounds_a_finite_value_to_inf(dtype, device):
    """issue 21 item 3: a float32 result just past the largest finite value (float16 65504 + 10; bfloat16 max +
    max/1000), positive or negative, is stored as that largest value, as round to nearest stores it (before, 31% and
    26% of the elements became inf); one far enough past it that round to nearest overflows is inf as before, inf
    and NaN are kept, and just below the maximum both neighbours are still drawn. The GPU and the twin agree bit for
    bit on the CPU adapter."""
    dt = DT[dtype]
    mx = np.float32(np.finfo(dt.np).max)
    step = np.float32(10.0) if dtype == "float16" else mx / np.float32(1000)
    big = np.float32(24.0) if dtype == "float16" else np.float32(1.5 * 2.0 ** 119)  # (past max + half a spacing)
    n = 10_000
    bits = np.random.default_rng(3).integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    for sign in (1, -1):
        edge = np.full(n, sign * (mx + step), np.float32)
        got = round_stochastic(edge, dt, bits)
        assert np.isfinite(got.astype(np.float32)).all() and (got.astype(np.float32) == sign * mx).all()
        assert (np.isinf(round_stochastic(np.full(n, sign * (mx + big), np.float32), dt, bits))).all()
    special = np.array([np.inf, -np.inf, np.nan], np.float32)
    kept = round_stochastic(special, dt, bits[:3]).astype(np.float32)
    assert kept[0] == np.inf and kept[1] == -np.inf and np.isnan(kept[2])
    below = (np.array([mx], np.float32).astype(dt.np).view(np.uint16) - np.uint16(1)).view(dt.np).astype(np.float32)[0]
    mid = np.full(n, below + (mx - below) / np.float32(2), np.float32)
    assert set(np.unique(round_stochastic(mid, dt, bits).astype(np.float32))) == {below, mx}
    # on the device: an SGD step p - lr * g from p = +-max
    p0 = np.concatenate([np.full(n // 2, mx), np.full(n // 2, -mx)]).astype(dt.np)
    g = np.concatenate([np.full(n // 2, -step), np.full(n // 2, step)]).astype(np.float32)
    kw = dict(lr=1.0, stochastic_rounding=True, grad_dtype="float32")
    opt = rlx_gpu.SGD({"w": p0}, **kw, device=device)
    twin = rlx_gpu.reference.SGD({"w": p0}, **kw)
    for o in (opt, twin):
        o.step({"w": g})
    out = opt.params["w"].numpy()
    assert not np.isinf(out.astype(np.float32)).any()
    np.testing.assert_array_equal(out.astype(np.float32), p0.astype(np.float32))
    if exact(device):
        np.testing.assert_array_equal(out.view(np.uint16), twin.params["w"].view(np.uint16))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("cls_name", ["AdamW", "SGD", "Adafactor"])
def test_master_trajectory_is_the_float32_optimizers(cls_name, dtype, device):
    """The float32 master copy follows exactly the float32 optimizer's trajectory on the same grads (bit for bit
    on the CPU adapter); the 16-bit param is its round-to-nearest-even value."""
    p16 = params_of(dtype, 3)
    p32 = {n: v.astype(np.float32) for n, v in p16.items()}
    kw = {"momentum": 0.9} if cls_name == "SGD" else {}
    low = getattr(rlx_gpu, cls_name)(p16, master_weights=True, grad_dtype="float32", **kw, device=device)
    full = getattr(rlx_gpu, cls_name)(p32, **kw, device=device)
    rng = np.random.default_rng(4)
    for _ in range(10):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p32.items()}
        low.step(g)
        full.step(g)
    master = {n: st["master_param"] for n, st in low.state_dict()["state"].items()}
    for n in p32:
        want = full.params[n].numpy()
        assert_close_typed(master[n], want, f"master of {n}", exact(device) and cls_name != "Adafactor")
        np.testing.assert_array_equal(low.params[n].numpy().view(np.uint16), master[n].astype(DT[dtype].np).view(np.uint16))


@pytest.mark.parametrize("cls_name", ["AdamW", "SGD", "RMSprop", "LAMB"])
def test_float16_with_and_without_shader_f16(cls_name, device):
    """float16 arenas bound as array<vec4<f16>> (shader-f16) and as packed u32 words give the same bits."""
    if not device.native_f16:
        pytest.skip("the adapter has no shader-f16")
    packed = device.with_binding_cap(device.max_storage_binding)
    packed.native_f16 = False
    params = params_of("float16", 6)
    a = getattr(rlx_gpu, cls_name)(params, state_dtype="float16", device=device)
    b = getattr(rlx_gpu, cls_name)(params, state_dtype="float16", device=packed)
    run(a, b, params, "float16")
    for n in params:
        np.testing.assert_array_equal(a.params[n].numpy().view(np.uint16), b.params[n].numpy().view(np.uint16))


def test_mixed_dtypes_in_one_group_and_device_tensors(device):
    from ml_dtypes import bfloat16
    params = {"a": np.ones(5, np.float32), "b": np.ones(6, np.float16), "c": np.ones((2, 3), bfloat16)}
    gpu = rlx_gpu.AdamW(params, device=device)
    twin = rlx_gpu.reference.AdamW(params)
    assert len(gpu.buckets) == 3 and {b.sig.param.name for b in gpu.buckets} == {"float32", "float16", "bfloat16"}
    for n, p in params.items():
        t = gpu.params[n]
        assert t.dtype == p.dtype and t.numpy().dtype == p.dtype and t.numpy().shape == p.shape
        assert gpu.grads[n].dtype == p.dtype and t.binding()["size"] % 4 == 0
    g = {n: np.full(p.shape, 0.5, p.dtype) for n, p in params.items()}
    g["c"] = np.full((2, 3), 0.5, np.float32)  # a float32 grad for a bfloat16 slot: rounded on upload
    gpu.step(g)
    twin.step(g)
    for n in params:
        np.testing.assert_array_equal(gpu.params[n].numpy(), twin.params[n])
    with pytest.raises(TypeError, match=r"grad for 'b' has dtype float64, expected float16 or float32"):
        gpu.step({"b": np.ones(6)})
    with pytest.raises(TypeError, match="'a' has dtype float64, expected float32, float16 or bfloat16"):
        rlx_gpu.AdamW({"a": np.ones(3)}, device=device)
    with pytest.raises(TypeError, match="'c': expected a bfloat16 array, got float32"):
        gpu.params["c"].write(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="stochastic_rounding rounds parameters that have no float32 master"):
        rlx_gpu.AdamW(params, master_weights=True, stochastic_rounding=True, device=device)
    with pytest.raises(ValueError, match="state_dtype must be one of"):
        rlx_gpu.AdamW(params, state_dtype="int8", device=device)


@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_state_dicts_and_checkpoints_keep_dtypes(tmp_path, twin, device):
    kw = {} if twin else {"device": device}
    cls = rlx_gpu.reference.AdamW if twin else rlx_gpu.AdamW
    params = params_of("bfloat16", 8)
    opt = cls(params, master_weights=True, **kw)
    run(opt, cls(params, master_weights=True, **kw), params, "bfloat16", steps=3)
    sd = opt.state_dict()
    assert sd["state"]["t0"]["exp_avg"].dtype == np.float32 and sd["state"]["t0"]["master_param"].dtype == np.float32
    opt.save(tmp_path / "c.npz")
    again = cls.load(tmp_path / "c.npz", **kw)
    assert again.options["master_weights"] and again.read_params()["t0"].dtype == params["t0"].dtype
    for n in params:
        assert again.read_params()[n].tobytes() == opt.read_params()[n].tobytes()
    for n, st in sd["state"].items():
        for k, v in st.items():
            if k != "step":
                assert np.asarray(again.state_dict()["state"][n][k]).tobytes() == np.asarray(v).tobytes()
    # a checkpoint of other dtypes: refused, or converted with cast=True
    full = cls({n: v.astype(np.float32) for n, v in params.items()}, **kw)
    with pytest.raises(ValueError, match="pass cast=True"):
        full.restore(tmp_path / "c.npz")
    full.restore(tmp_path / "c.npz", cast=True)
    assert full.read_params()["t0"].dtype == np.float32
    np.testing.assert_array_equal(full.read_params()["t0"], opt.read_params()["t0"].astype(np.float32))
    bf = cls(params, state_dtype="bfloat16", **kw)
    with pytest.raises(ValueError, match="exp_avg of 't0' is float32, this optimizer keeps it in bfloat16"):
        bf.load_state_dict({"state": {n: {k: v for k, v in st.items() if k != "master_param"}
                                      for n, st in sd["state"].items()}, "param_groups": sd["param_groups"]})


@pytest.mark.gpu
@pytest.mark.parametrize("state", ["bfloat16", "float16"])
def test_float32_params_with_16_bit_states(state, device):
    """float32 params whose moments are kept in 16 bits: the twin updates the params (it once updated a copy and
    dropped it) and agrees with the GPU."""
    params = {"w": np.random.default_rng(3).standard_normal(300).astype(np.float32)}
    gpu = rlx_gpu.AdamW(params, state_dtype=state, device=device)
    twin = rlx_gpu.reference.AdamW(params, state_dtype=state)
    rng = np.random.default_rng(4)
    for _ in range(5):
        g = {"w": rng.standard_normal(300).astype(np.float32)}
        gpu.step(g)
        twin.step(g)
    assert not np.array_equal(twin.params["w"], params["w"])
    np.testing.assert_allclose(gpu.params["w"].numpy(), twin.params["w"], rtol=2e-5, atol=1e-6)
