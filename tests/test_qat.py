"""Quantization-aware training: the twins (rlx_gpu.reference.qat, qat_observers) against torch's CPU kernels, and
rlx_gpu.qat's device kernels against the twins and torch, bit for bit (forward, masks, STE; the LSQ sums to
float32 rounding of a sum of n terms), over random, extreme (+-inf, NaN, denormals, rounding midpoints) and
awkward-size inputs."""
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu import qat
from rlx_gpu.reference import qat as R
from rlx_gpu.reference import qat_observers as O

torch = pytest.importorskip("torch", reason="torch's fake-quantize kernels are the oracle")
tq = pytest.importorskip("torch.ao.quantization")

SIZES = [1, 3, 4, 5, 7, 257, 1023, 4099]
RANGES = [(-128, 127), (0, 255), (-8, 7), (0, 15)]


def bits(a):
    return np.ascontiguousarray(np.asarray(a, np.float32)).view(np.uint32)


def extreme(n, rng, scale=1.0):
    """Random values with +-inf, NaN, huge values, denormals and exact rounding midpoints (k + 0.5) * scale."""
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 60.0])).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 3e9, 1e-42, -1e-42, 0.0, -0.0], np.float32)
    mids = ((rng.integers(-140, 140, 16) + 0.5) * scale).astype(np.float32)
    pool = np.concatenate([special, mids])
    k = min(n, pool.size)
    x[rng.choice(n, k, replace=False)] = pool[:k]
    return x


def torch_pt(x, scale, zp, lo, hi):
    return torch.fake_quantize_per_tensor_affine(torch.from_numpy(x), scale, zp, lo, hi).numpy()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("qrange", RANGES)
def test_per_tensor_twin_is_torch(n, qrange):
    rng = np.random.default_rng(n + qrange[1])
    lo, hi = qrange
    for scale in (0.25, float(np.float32(0.0371)), 1.7):
        zp = int(rng.integers(lo, hi + 1))
        x = extreme(n, rng, scale)
        assert (bits(R.fake_quantize_per_tensor_affine(x, scale, zp, lo, hi)) == bits(torch_pt(x, scale, zp, lo, hi))).all()
        xt = torch.from_numpy(x).requires_grad_()
        dy = rng.standard_normal(n).astype(np.float32)
        dy[0] = np.nan
        torch.fake_quantize_per_tensor_affine(xt, scale, zp, lo, hi).backward(torch.from_numpy(dy))
        assert (bits(R.ste_backward(dy, x, scale, zp, lo, hi)) == bits(xt.grad.numpy())).all()


@pytest.mark.parametrize("shape,axis", [((3, 5), 0), ((3, 5), 1), ((4, 1, 7), 2), ((2, 3, 9), 1), ((1, 1), 0)])
def test_per_channel_twin_is_torch(shape, axis):
    rng = np.random.default_rng(sum(shape) + axis)
    n = int(np.prod(shape))
    for lo, hi in RANGES:
        x = extreme(n, rng, 0.5).reshape(shape)
        c = shape[axis]
        sc = rng.uniform(0.01, 2, c).astype(np.float32)
        zp = rng.integers(lo, hi + 1, c).astype(np.int32)
        args = (torch.from_numpy(sc), torch.from_numpy(zp), axis, lo, hi)
        want = torch.fake_quantize_per_channel_affine(torch.from_numpy(x), *args).numpy()
        assert (bits(R.fake_quantize_per_channel_affine(x, sc, zp, axis, lo, hi)) == bits(want)).all()
        xt = torch.from_numpy(x).requires_grad_()
        dy = rng.standard_normal(shape).astype(np.float32)
        torch.fake_quantize_per_channel_affine(xt, *args).backward(torch.from_numpy(dy))
        assert (bits(R.ste_backward_per_channel(dy, x, sc, zp, axis, lo, hi)) == bits(xt.grad.numpy())).all()


def test_nan_and_inf_as_torch_measured():
    """What torch 2.13's CPU kernels give (docs/guides/qat.md): per tensor +inf -> quant_max, -inf and NaN -> quant_min;
    per channel all three -> quant_min; the mask is false for all of them."""
    x = np.array([np.nan, np.inf, -np.inf], np.float32)
    assert R.fake_quantize_per_tensor_affine(x, 1.0, 0, -128, 127).tolist() == [-128, 127, -128]
    assert R.fake_quantize_per_channel_affine(x[None], [1.0], [0], 0, -128, 127).tolist() == [[-128, -128, -128]]
    assert torch_pt(x, 1.0, 0, -128, 127).tolist() == [-128, 127, -128]


def test_lsq_twin_is_torch():
    """torch._fake_quantize_learnable_per_tensor_affine's gradients: dx bit for bit, dscale and dzero_point (sums
    of n float32 terms in another order) to 1e-5 of the sum of |terms|."""
    rng = np.random.default_rng(1)
    for n, (lo, hi) in zip((5, 300, 4099, 1000), RANGES):
        x = extreme(n, rng)
        x[np.isnan(x) | np.isinf(x)] = 3.0  # (torch sums NaN terms; a NaN scale grad says nothing more)
        dy = rng.standard_normal(n).astype(np.float32)
        for scale, zpf, gf in ((0.05, lo + 0.3 * (hi - lo), 1.0), (0.7, lo + 0.71 * (hi - lo), 0.25)):
            s, z = torch.tensor([scale], requires_grad=True), torch.tensor([zpf], requires_grad=True)
            xt = torch.from_numpy(x).requires_grad_()
            torch._fake_quantize_learnable_per_tensor_affine(xt, s, z, lo, hi, gf).backward(torch.from_numpy(dy))
            dx, ds, dz = R.lsq_backward(dy, x, scale, zpf, lo, hi, gf)
            assert (bits(dx) == bits(xt.grad.numpy())).all()
            tol = 1e-5 * (np.abs(dy).sum() * max(hi - lo, 1) + 1)
            assert abs(ds[0] - s.grad.item()) <= tol and abs(dz[0] - z.grad.item()) <= tol


def fp8_inputs(rng):
    b = rng.integers(0, 2 ** 32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([448, 464, 465, 480, 479.9, 57344, 61439, 61440, 65536, 2 ** -10, 3 * 2 ** -10, 2 ** -9,
                        2 ** -17, 3 * 2 ** -17, 2 ** -6, 2 ** -14, np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0,
                        1e-42, 1.0625, 1.1875], np.float32)
    return np.concatenate([b, special, -special])


# The boundary rule, by hand: round to nearest even, then past the largest finite value (e4m3fn 448: 464 is the tie
# that rounds down, 465 rounds up; e5m2 57344: 61440 is the tie that rounds up) saturate=True gives +-max (inf too)
# and saturate=False the OCP non-saturating result (e4m3fn NaN 0x7f, e5m2 inf 0x7c). NaN is 0x7f either way.
FP8_EDGES = {"e4m3fn": ([448, 464, 465, 479.9, 480, 1e6, np.inf, np.nan],
                        [0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7f], [0x7e, 0x7e, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f]),
             "e5m2": ([57344, 61439, 61440, 65536, 1e6, np.inf, np.nan],
                      [0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7f], [0x7b, 0x7b, 0x7c, 0x7c, 0x7c, 0x7c, 0x7f])}
TORCH_FP8 = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def torch_fp8_saturates(fmt: str) -> bool:
    """Which of our two rules the installed torch's ``.to(float8)`` follows out of range. torch changed its e4m3fn
    cast: up to 2.11 it gives NaN (saturate=False: the OCP rule, ml_dtypes'); 2.13 saturates to 448 (saturate=True;
    pytorch PR 178817, "Properly saturate E4M3 on finite-overflow on CPU/C++ conversion code"). e5m2 gives inf in
    both. In range the versions agree."""
    v = torch.tensor([1e6]).to(TORCH_FP8[fmt]).float().item()  # (past both formats' largest)
    return bool(np.isfinite(v))


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_fp8_boundaries_follow_the_documented_rule(fmt):
    """The values at and past the largest finite float8 value, both signs, against the rule written above."""
    v, sat, nosat = FP8_EDGES[fmt]
    x = np.array(v + [-a for a in v], np.float32)
    for flag, want in ((True, sat), (False, nosat)):
        codes = R.fp8_codes(x, fmt, flag)
        assert codes.tolist() == want + [c | 0x80 for c in want], (fmt, flag)


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_fp8_twin_is_torch(fmt):
    """Round trips through torch's casts: bit for bit where our two rules agree (every value that rounds within
    range, and NaN: the same in every torch); out of range torch's cast is one of the two rules, whole (e5m2: inf,
    saturate=False, in every torch; e4m3fn: NaN up to torch 2.11, 448 in torch 2.13: :func:`torch_fp8_saturates`).
    saturate=True is torch.clamp(x, -max, max).to(fp8) in both formats and saturate=False is ml_dtypes' cast for
    non-NaN inputs."""
    import ml_dtypes
    dt = TORCH_FP8[fmt]
    x = fp8_inputs(np.random.default_rng(2))
    t = torch.from_numpy(x.copy())
    cast = t.to(dt)
    codes = cast.view(torch.uint8).numpy()
    agree = R.fp8_codes(x, fmt, True) == R.fp8_codes(x, fmt, False)
    assert 0 < (~agree).sum() < agree.sum()  # (both kinds of input are there)
    assert (R.fp8_codes(x[agree], fmt, True) == codes[agree]).all()
    torch_sat = torch_fp8_saturates(fmt)
    version = tuple(int(a) for a in torch.__version__.split(".")[:2])
    if fmt == "e5m2" or version <= (2, 11):
        assert not torch_sat
    elif version >= (2, 13):
        assert torch_sat
    assert (R.fp8_codes(x, fmt, torch_sat) == codes).all()
    assert (bits(R.fake_quantize_fp8(x, fmt, torch_sat)) == bits(cast.float().numpy())).all()
    top = R.FP8[fmt][0]
    clamped = t.clamp(-top, top).to(dt)
    assert (bits(R.fake_quantize_fp8(x, fmt, True)) == bits(clamped.float().numpy())).all()
    ok = ~np.isnan(x)
    md = x.astype(getattr(ml_dtypes, "float8_" + fmt)).view(np.uint8)
    assert (R.fp8_codes(x, fmt, False)[ok] == md[ok]).all()
    xt = torch.from_numpy(x[ok].copy()).requires_grad_()
    dy = np.random.default_rng(3).standard_normal(xt.shape[0]).astype(np.float32)
    xt.clamp(-top, top).backward(torch.from_numpy(dy))  # (the straight-through part: clamp's gradient)
    assert (bits(R.ste_backward_fp8(dy, x[ok], fmt, True)) == bits(xt.grad.numpy())).all()


OBSERVERS = ["MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
             "MovingAveragePerChannelMinMaxObserver"]


def observer_configs(name):
    pc = "PerChannel" in name
    for dtype in ("quint8", "qint8"):
        for sym in (False, True):
            for rr in (False, True):
                for custom in (None, (-8, 7), (0, 15)):
                    if custom and (dtype == "quint8") != (custom[0] == 0):
                        continue
                    qs = ("per_channel_" if pc else "per_tensor_") + ("symmetric" if sym else "affine")
                    kw = dict(dtype=dtype, qscheme=qs, reduce_range=rr)
                    if custom:
                        kw.update(quant_min=custom[0], quant_max=custom[1])
                    yield kw


def torch_kwargs(kw):
    return {**kw, "dtype": getattr(torch, kw["dtype"]), "qscheme": getattr(torch, kw["qscheme"])}


def batches(rng, k=4, shape=(6, 37)):
    return [(rng.standard_normal(shape) * rng.uniform(0.01, 10) + rng.uniform(-3, 3)).astype(np.float32)
            for _ in range(k)]


@pytest.mark.parametrize("name", OBSERVERS)
def test_observer_twins_are_torch(name):
    """min/max state and calculate_qparams bit for bit against torch.ao.quantization (torch 2.13 still ships
    these four observers there), for every dtype, scheme, reduce_range and custom range torch accepts."""
    rng = np.random.default_rng(4)
    for kw in observer_configs(name):
        try:
            t = getattr(tq, name)(**torch_kwargs(kw), averaging_constant=0.3) if "Moving" in name else \
                getattr(tq, name)(**torch_kwargs(kw))
        except (NotImplementedError, AssertionError, ValueError):
            with pytest.raises((NotImplementedError, ValueError)):
                getattr(O, name)(**kw)
            continue
        r = getattr(O, name)(**kw, averaging_constant=0.3)
        for x in batches(rng):
            t(torch.from_numpy(x))
            r(x)
        ts, tz = t.calculate_qparams()
        rs, rz = r.calculate_qparams()
        assert (bits(ts.numpy()) == bits(rs)).all() and (tz.numpy() == rz).all(), kw
        assert (bits(t.min_val.numpy()) == bits(r.min_val)).all() and (bits(t.max_val.numpy()) == bits(r.max_val)).all()


# -- the device kernels -------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
def test_gpu_per_tensor_is_torch(device, n):
    rng = np.random.default_rng(10 + n)
    for lo, hi in RANGES:
        zp = int(rng.integers(lo, hi + 1))
        x = extreme(n, rng, 0.3)
        want = torch_pt(x, 0.3, zp, lo, hi)
        assert (bits(qat.fake_quantize_per_tensor_affine(x, 0.3, zp, lo, hi, device=device)) == bits(want)).all()
        dy = rng.standard_normal(n).astype(np.float32)
        got = qat.ste_backward(dy, x, 0.3, zp, lo, hi, device=device)
        assert (bits(got) == bits(R.ste_backward(dy, x, 0.3, zp, lo, hi))).all()


@pytest.mark.gpu
@pytest.mark.parametrize("shape,axis", [((3, 5), 0), ((3, 5), 1), ((4, 1, 7), 2), ((2, 3, 9), 1), ((65, 33), 0)])
def test_gpu_per_channel_is_torch(device, shape, axis):
    rng = np.random.default_rng(sum(shape))
    x = extreme(int(np.prod(shape)), rng, 0.5).reshape(shape)
    sc = rng.uniform(0.01, 2, shape[axis]).astype(np.float32)
    zp = rng.integers(-8, 8, shape[axis]).astype(np.int32)
    want = torch.fake_quantize_per_channel_affine(torch.from_numpy(x), torch.from_numpy(sc), torch.from_numpy(zp),
                                                  axis, -8, 7).numpy()
    got = qat.fake_quantize_per_channel_affine(x, sc, zp, axis, -8, 7, device=device)
    assert got.shape == shape and (bits(got) == bits(want)).all()
    dy = rng.standard_normal(shape).astype(np.float32)
    got = qat.ste_backward_per_channel(dy, x, sc, zp, axis, -8, 7, device=device)
    assert (bits(got) == bits(R.ste_backward_per_channel(dy, x, sc, zp, axis, -8, 7))).all()


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_gpu_fp8_is_torch(device, fmt):
    x = fp8_inputs(np.random.default_rng(5))
    for sat in (True, False):
        got = qat.fake_quantize_fp8(x, fmt, sat, device=device)
        assert (bits(got) == bits(R.fake_quantize_fp8(x, fmt, sat))).all(), sat
    cast = torch.from_numpy(x.copy()).to(TORCH_FP8[fmt]).float()  # (torch's rule out of range: torch_fp8_saturates)
    assert (bits(qat.fake_quantize_fp8(x, fmt, torch_fp8_saturates(fmt), device=device)) == bits(cast.numpy())).all()
    dy = np.random.default_rng(6).standard_normal(x.size).astype(np.float32)
    assert (bits(qat.ste_backward_fp8(dy, x, fmt, device=device)) == bits(R.ste_backward_fp8(dy, x, fmt))).all()


@pytest.mark.gpu
def test_gpu_lsq_matches_torch(device):
    rng = np.random.default_rng(7)
    x = extreme(4099, rng)
    x[~np.isfinite(x)] = -2.0
    dy = rng.standard_normal(x.size).astype(np.float32)
    s, z = torch.tensor([0.05], requires_grad=True), torch.tensor([3.3], requires_grad=True)
    xt = torch.from_numpy(x).requires_grad_()
    torch._fake_quantize_learnable_per_tensor_affine(xt, s, z, -128, 127, 0.5).backward(torch.from_numpy(dy))
    dx, ds, dz = qat.lsq_backward(dy, x, 0.05, 3.3, -128, 127, 0.5, device=device)
    assert (bits(dx) == bits(xt.grad.numpy())).all()
    tol = 1e-5 * (np.abs(dy).sum() * 255 + 1)
    assert abs(ds[0] - s.grad.item()) <= tol and abs(dz[0] - z.grad.item()) <= tol


@pytest.mark.gpu
def test_gpu_device_tensors_in_and_out(device):
    """DeviceTensors in give a DeviceTensor out (an optimizer's params, bound in place), equal to the NumPy path."""
    w = np.random.default_rng(8).standard_normal((37, 11)).astype(np.float32)
    opt = rlx_gpu.SGD({"w": w}, lr=0.1, device=device)
    y = qat.fake_quantize_per_channel_affine(opt.params["w"], np.full(37, 0.1, np.float32), np.zeros(37, int), 0,
                                             -8, 7)
    assert isinstance(y, rlx_gpu.DeviceTensor) and y.shape == (37, 11)
    assert (bits(y.numpy()) == bits(R.fake_quantize_per_channel_affine(w, np.full(37, 0.1), np.zeros(37), 0, -8, 7))).all()
    f = qat.fake_quantize_fp8(y, "e5m2")
    assert isinstance(f, rlx_gpu.DeviceTensor) and (bits(f.numpy()) == bits(R.fake_quantize_fp8(y.numpy(), "e5m2"))).all()


@pytest.mark.gpu
@pytest.mark.parametrize("name", OBSERVERS)
def test_gpu_observers_are_torch(device, name):
    """Device observers: state and qparams bit for bit against the twins (which are torch's), and their device
    qparams drive fake-quantization without a read-back."""
    rng = np.random.default_rng(9)
    for kw in observer_configs(name):
        try:
            r = getattr(O, name)(**kw, averaging_constant=0.3)
        except (NotImplementedError, ValueError):
            continue
        g = getattr(qat, name)(**kw, averaging_constant=0.3)
        xs = batches(rng, shape=(5, 3, 7))
        for x in xs:
            r(x)
            g(x)
        gs, gz = g.calculate_qparams()
        rs, rz = r.calculate_qparams()
        assert (bits(gs) == bits(rs)).all() and (gz == rz).all(), kw
        assert (bits(g.min_val) == bits(r.min_val)).all() and (bits(g.max_val) == bits(r.max_val)).all()
    obs = qat.MovingAverageMinMaxObserver(dtype="quint8")
    x = batches(rng, 1)[0]
    obs(x)
    s, z = obs.calculate_qparams()
    y = qat.fake_quantize_per_tensor_affine(x, obs.qparams, None, obs.quant_min, obs.quant_max, device=device)
    assert (bits(y) == bits(torch_pt(x, float(s[0]), int(z[0]), 0, 255))).all()


def test_the_observer_batches_tell_a_fused_moving_average_apart():
    """The batches test_gpu_observers_are_torch feeds: torch rounds min + c * (cur - min)'s product before the add,
    and on them a fused multiply-add (what NVIDIA's compiler made of the kernel before ``rounded()`` in
    qat_kernels.wgsl: scales a last bit apart on the H200) gives other bits, so that test tells the two apart."""
    xs = batches(np.random.default_rng(9), shape=(5, 3, 7))
    c = np.float32(0.3)
    twin = O.MovingAverageMinMaxObserver(averaging_constant=0.3)
    fused = apart = None
    for x in xs:
        twin(x)
        cur = np.array([x.min(), x.max()], np.float32)
        if fused is None:
            fused = cur
            continue
        fused = (fused.astype(np.float64) + np.float64(c) * (cur - fused).astype(np.float64)).astype(np.float32)
        apart = apart or bool((bits(fused) != bits(np.array([twin.min_val, twin.max_val], np.float32))).any())
    assert apart


@pytest.mark.gpu
def test_gpu_observers_take_your_kernels_buffers(device):
    """An observer records float32 values a user's kernel wrote into a buffer of its own (a range as Program binds
    it, with its shape), in the user's encoder: the same state as the twin's; a range that cannot hold the shape,
    or no device for a bare range, is refused and changes nothing."""
    rng = np.random.default_rng(10)
    xs = [rng.standard_normal((6, 10)).astype(np.float32) * (k + 1) for k in range(3)]
    buf = device.buffer(256 + 4 * 60, "mine")
    twin = O.MovingAveragePerChannelMinMaxObserver(dtype="qint8", qscheme="per_channel_symmetric", ch_axis=1)
    obs = qat.MovingAveragePerChannelMinMaxObserver(dtype="qint8", qscheme="per_channel_symmetric", ch_axis=1)
    for x in xs:
        device.queue.write_buffer(buf, 256, x)
        enc = device.encoder()
        obs.record(enc, {"buffer": buf, "offset": 256, "size": 240}, shape=(6, 10), device=device)
        device.submit(enc)
        twin(x)
    assert (bits(obs.calculate_qparams()[0]) == bits(twin.calculate_qparams()[0])).all()
    assert (bits(obs.min_val) == bits(twin.min_val)).all() and (bits(obs.max_val) == bits(twin.max_val)).all()
    with pytest.raises(ValueError, match="cannot hold shape"):
        obs.record(device.encoder(), (buf, 256, 240), shape=(7, 10))
    with pytest.raises(ValueError, match="pass device="):
        qat.MinMaxObserver().record(device.encoder(), buf)
    assert (bits(obs.min_val) == bits(twin.min_val)).all()


@pytest.mark.gpu
def test_errors_name_the_argument(device):
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="float32"):
        qat.fake_quantize_per_tensor_affine(np.ones(4), 0.1, 0, -128, 127)
    with pytest.raises(ValueError, match="quant_min"):
        qat.fake_quantize_per_tensor_affine(x, 0.1, 0, 5, 1)
    with pytest.raises(ValueError, match="zero_point"):
        qat.fake_quantize_per_tensor_affine(x, 0.1, 300, -128, 127)
    with pytest.raises(ValueError, match="scale"):
        qat.fake_quantize_per_tensor_affine(x, -0.1, 0, -128, 127)
    with pytest.raises(ValueError, match="axis"):
        qat.fake_quantize_per_channel_affine(x, [0.1], [0], 1, -128, 127)
    with pytest.raises(ValueError, match="expected 4 scale"):
        qat.fake_quantize_per_channel_affine(x, [0.1], [0], 0, -128, 127)
    with pytest.raises(ValueError, match="fmt"):
        qat.fake_quantize_fp8(x, "e3m4")
    with pytest.raises(ValueError, match="dy has shape"):
        qat.ste_backward(np.ones(3, np.float32), x, 0.1, 0, -128, 127)
    with pytest.raises(ValueError, match="include 0"):
        qat.MinMaxObserver(quant_min=1, quant_max=7)
