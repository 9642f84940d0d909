"""Block-quantized states (``state_bits=8`` and ``4``): the maps against bitsandbytes'/torchao's construction, the
rounding rule, the GPU against its twin bit for bit (on the CPU adapter: every code, absmax, state and param
equal; elsewhere a code may differ by one step of the map where the float32 value before quantization differs in
its last bit), state dicts and checkpoints between quantized and float32 optimizers, errors, memory and a
training task."""
import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu.core import quant
from helpers import make_grads, make_params, snapshot

CASES = [("Adam", {"amsgrad": True, "weight_decay": 0.1}), ("AdamW", {"maximize": True}),
         ("Lion", {"weight_decay": 0.1, "lr": 1e-3}), ("SGD", {"momentum": 0.9, "nesterov": True}),
         ("SGD", {"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
         ("RMSprop", {"momentum": 0.5, "centered": True}), ("RMSprop", {})]
# 4097 and 4095 around min_quantized_size, 4096 exactly, a block split over 64 KiB chunks (40000), odd shapes
SIZES = [4097, (64, 96), 4095, 10, 4096, (3, 3001), 40000]


def test_maps_are_the_libraries_maps():
    """rlx_gpu/core/qmaps.py holds what bitsandbytes' create_dynamic_map and torchao's 4-bit maps compute."""
    pytest.importorskip("torch", reason="torch computes the reference maps")
    spec = importlib.util.spec_from_file_location("gen_qmaps", Path(__file__).parents[1] / "tools" / "gen_qmaps.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    want = gen.maps()
    for (bits, signed), key in {(8, True): "SIGNED_8", (8, False): "UNSIGNED_8", (4, True): "SIGNED_4",
                                (4, False): "UNSIGNED_4"}.items():
        assert np.array_equal(quant.qmap(bits, signed).view(np.uint32), want[key].view(np.uint32)), key
    assert quant.qmap(8, True).size == 256 and quant.qmap(4, False)[0] == np.float32(1 / 16)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("signed", [True, False])
def test_codes_are_the_nearest_entry(bits, signed):
    """Every code is the nearest map entry to v / |absmax| (v negated in a block stored negated: its absmax word's
    sign bit; within a float32 rounding at a midpoint), so the round trip error is at most half the largest gap of
    the map, or the gap past an end of it (to -1 or 0), times the block's |absmax|; the block's extreme is exact; a
    zero block is exactly zero. The one exception: a positive value of an 8-bit unsigned state whose nearest entry
    is 0 gets code 1 (it never reads back as 0)."""
    rng = np.random.default_rng(bits)
    B = quant.BLOCK[bits]
    x = rng.standard_normal(7 * B + 5).astype(np.float32) * np.repeat(10.0 ** rng.integers(-8, 3, 8), B)[:7 * B + 5]
    x = x.astype(np.float32) if signed else np.abs(x).astype(np.float32)
    x[2 * B:3 * B] = 0  # a zero block
    x[3 * B + 7] = 1e-12 * np.abs(x[3 * B:4 * B]).max()  # nearest entry 0
    codes, absmax = quant.quantize(x, bits, signed)
    assert codes.shape == x.shape and absmax.shape == (8,) and codes.max() < 2 ** bits
    back = quant.dequantize(codes, absmax, bits, signed)
    m = quant.qmap(bits, signed).astype(np.float64)
    a = np.repeat(absmax.astype(np.float64), B)[:x.size]  # (signed: a negative word is a negated block)
    err = np.abs(back - x.astype(np.float64))
    lo, hi = np.maximum(codes.astype(int) - 1, 0), np.minimum(codes.astype(int) + 1, m.size - 1)
    lifted = (not signed) & (m[0] == 0) & (codes == 1) & (x < m[1] * a / 2)  # the exception
    assert lifted.sum() == (bits == 8 and not signed), np.flatnonzero(lifted)
    for nb in (lo, hi):  # no neighbouring entry is nearer (up to float32 rounding of a * midpoint)
        assert (lifted | (err <= np.abs(m[nb] * a - x) + 1e-6 * np.abs(a) + 1e-30)).all()
    worst = max(np.max(np.diff(m)) / 2, 1 - m[-1], m[0] + 1 if signed else m[0])  # (inside, past the ends)
    assert (lifted | (err <= np.abs(a) * worst * (1 + 1e-5) + 1e-30)).all()
    extreme = np.abs(x).reshape(-1)[:7 * B].reshape(7, B).max(axis=1)
    assert np.array_equal(np.abs(absmax[:7]), extreme)
    assert np.array_equal(np.abs(back[:7 * B]).reshape(7, B).max(axis=1), extreme)  # (exact)
    assert (absmax < 0).any() == signed  # (some blocks stored negated)
    assert (back[2 * B:3 * B] == 0).all() and absmax[2] == 0
    assert np.array_equal(quant.unpack_codes(quant.pack_codes(codes, bits), codes.size, bits), codes)


def _pair(cls_name, opts, bits, device, sizes=SIZES, **kw):
    params = make_params(sizes, seed=3)
    gpu = getattr(rlx_gpu, cls_name)(params, **opts, state_bits=bits, device=device, **kw)
    twin = getattr(rlx_gpu.reference, cls_name)(params, **opts, state_bits=bits, **kw)
    return params, gpu, twin


def step_both(gpu, twin, g, **kw):
    """One step of each. On a CPU adapter the twin runs on by itself (the results are bit-identical); elsewhere it
    first takes the GPU's params and state, so each step is compared from the same start (a code that flips on a
    last-bit difference changes later steps by more than one code)."""
    if not exact_adapter(gpu):
        twin.load_state_dict(gpu.state_dict(), params=gpu.read_params())
    gpu.step(g, **kw)
    twin.step(g, **kw)


def exact_adapter(gpu) -> bool:
    return gpu.device.info["type"] == "CPU"


def assert_identical(gpu, twin, what, exact=None):
    """Every param, code, absmax, map and state. On a CPU adapter (IEEE float32, no contraction) bit for bit;
    elsewhere (FMA, approximate division), after one step from the same start: params to 1e-5 relative plus 3e-3
    absolute (one code of v at the bottom of the 4-bit map moves an Adam update by up to 40% of lr) and each
    dequantized state to one step of its map times its block's absmax: a value that lands on the other side of a
    midpoint in its last bit takes the next code."""
    if exact is None:
        exact = exact_adapter(gpu)
    for n, p in twin.params.items():
        if exact:
            assert np.array_equal(gpu.params[n].numpy(), p, equal_nan=True), f"{what}: param {n}"
        else:
            np.testing.assert_allclose(gpu.params[n].numpy().astype(np.float32), p.astype(np.float32), rtol=1e-5,
                                       atol=3e-3, err_msg=f"{what}: param {n}")
    gs, ts = gpu.state_dict()["state"], twin.state_dict()["state"]
    assert gs.keys() == ts.keys()
    for n in ts:
        assert gs[n].keys() == ts[n].keys(), f"{what}: {n}: {sorted(gs[n])} vs {sorted(ts[n])}"
        for k, v in ts[n].items():
            if exact:
                assert np.array_equal(np.asarray(gs[n][k]), np.asarray(v), equal_nan=True), f"{what}: {k} of {n}"
            elif k.endswith("_codes"):
                s = k[:-6]
                bits = {256: 8, 16: 4}[ts[n][s + "_qmap"].size]
                signed = gpu.spec.quantizable[s]
                a, b = (quant.dequantize(quant.element_codes(st[k], twin.params[n].shape, bits), st[s + "_absmax"],
                                         bits, signed) for st in (gs[n], ts[n]))
                step = np.max(np.diff(quant.qmap(bits, signed)))
                amax = np.repeat(np.maximum(np.abs(gs[n][s + "_absmax"]), np.abs(ts[n][s + "_absmax"])),
                                 quant.BLOCK[bits])
                amax = amax[:a.size].reshape(a.shape)
                # (an element both sides read as the same inf is equal: inf - inf is NaN, which no bound admits)
                near = (a == b) | (np.abs(a - b) <= amax * step * 1.001 + 1e-5 * amax)
                assert near.all(), f"{what}: {s} of {n}"
            elif not k.endswith(("_absmax", "_qmap")) and k != "step":
                np.testing.assert_allclose(np.asarray(gs[n][k], np.float32), np.asarray(v, np.float32), rtol=1e-4,
                                           atol=1e-5, err_msg=f"{what}: {k} of {n}")
            elif k == "step":
                assert gs[n][k] == v


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("cls_name,opts", CASES)
def test_gpu_matches_twin_bit_for_bit(cls_name, opts, bits, device):
    """25 steps on arenas chunked at 64 KiB, tensors without a grad on some steps, an lr_scale and an inf step
    that is skipped (codes and absmax unchanged)."""
    small = device.with_binding_cap(64 * 1024)
    params, gpu, twin = _pair(cls_name, opts, bits, small, lr_scale={"t1": 0.5}, skip_nonfinite=True)
    assert any(b.sig.qbits == bits for b in gpu.buckets) and any(b.sig.qbits == 0 for b in gpu.buckets)
    assert any(len(ps) > 1 for b in gpu.buckets for ps in b.layout.pieces)  # t6 split over chunks
    rng = np.random.default_rng(4)
    for s in range(25):
        g = make_grads(params, rng, drop={"t1", "t3"} if s % 7 == 3 else ())
        if s == 10:
            before = snapshot(gpu)
            g["t0"][7] = np.inf
        step_both(gpu, twin, g)
        if s == 10:
            assert gpu.last_step_skipped and twin.last_step_skipped
            assert snapshot(gpu) == before
    assert_identical(gpu, twin, f"{cls_name} {opts} {bits}-bit")
    sd = gpu.state_dict()["state"]
    q = [s for s in gpu.spec.quantizable if s + "_codes" in sd["t0"]]
    assert q and all(s in sd["t2"] for s in q)  # t0 (4097) quantized, t2 (4095) not


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
def test_clipped_steps_within_one_code(bits, device):
    """With clip_grad_norm the GPU's norm is summed in another order than the twin's (a last-bit difference in the
    clip factor, as for every optimizer): the tolerance of other adapters (assert_identical)."""
    params, gpu, twin = _pair("AdamW", {}, bits, device, clip_grad_norm=20.0)
    rng = np.random.default_rng(8)
    for _ in range(15):
        g = make_grads(params, rng)
        twin.load_state_dict(gpu.state_dict(), params=gpu.read_params())  # each step from the same start
        gpu.step(g)
        twin.step(g)
    assert_identical(gpu, twin, f"clipped {bits}-bit", exact=False)


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
def test_bfloat16_master_weights_and_schedule(bits, device):
    """Mixed precision around quantized states: bfloat16 params with float32 master copies, an lr schedule."""
    params = {n: a.astype(ml_dtypes.bfloat16) for n, a in make_params([5000, (70, 90), 33], seed=5).items()}
    kw = dict(state_bits=bits, master_weights=True, lr=1e-2)
    gpu, twin = rlx_gpu.AdamW(params, **kw, device=device), rlx_gpu.reference.AdamW(params, **kw)
    sched = rlx_gpu.schedules.CosineAnnealingLR(gpu, T_max=20)
    rng = np.random.default_rng(6)
    for _ in range(20):
        g = {n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items()}
        twin.set_lr(gpu.param_groups[0]["lr"])
        step_both(gpu, twin, g)
        sched.step()
    assert_identical(gpu, twin, f"bf16 {bits}-bit")


@pytest.mark.gpu
def test_state_dicts_move_between_quantized_and_float32(device, tmp_path):
    """8-bit -> float32 -> 8-bit: the same codes and absmax words (every block's extreme is exact); 8 -> 4 bits
    requantizes; dequantize=True is float32; twin <-> GPU; a checkpoint resumes bit for bit."""
    params, gpu, twin = _pair("AdamW", {}, 8, device, sizes=[5000, (80, 80), 7])
    rng = np.random.default_rng(7)
    for _ in range(5):
        step_both(gpu, twin, make_grads(params, rng))
    sd = gpu.state_dict()
    deq = gpu.state_dict(dequantize=True)["state"]["t0"]
    assert deq["exp_avg"].dtype == np.float32 and "exp_avg_codes" not in deq
    st = sd["state"]["t0"]
    assert np.array_equal(deq["exp_avg"], quant.dequantize(st["exp_avg_codes"], st["exp_avg_absmax"], 8, True))
    f32 = rlx_gpu.AdamW(params, device=device)
    f32.load_state_dict(sd)
    assert np.array_equal(f32.state_dict()["state"]["t0"]["exp_avg_sq"], deq["exp_avg_sq"])
    back = rlx_gpu.AdamW(params, state_bits=8, device=device)
    back.load_state_dict(f32.state_dict())  # load_state_dict quantizes: exactly the codes it came from
    again = back.state_dict()["state"]["t0"]
    for k in ("exp_avg", "exp_avg_sq"):
        assert np.array_equal(again[k + "_codes"], st[k + "_codes"]), k
        assert again[k + "_absmax"].tobytes() == st[k + "_absmax"].tobytes(), k
    four = rlx_gpu.AdamW(params, state_bits=4, device=device)
    four.load_state_dict(sd)
    st4 = four.state_dict()["state"]["t0"]
    assert st4["exp_avg_qmap"].size == 16
    assert np.array_equal(st4["exp_avg_codes"], quant.stored_codes(quant.quantize(deq["exp_avg"], 4, True)[0], 4))
    t2 = rlx_gpu.reference.AdamW(params, state_bits=8)
    t2.load_state_dict(sd, params=gpu.read_params())
    path = tmp_path / "q.npz"
    gpu.save(path)
    resumed = rlx_gpu.Optimizer.load(path, device=device)
    assert resumed.options["state_bits"] == 8
    g = make_grads(params, rng)
    resumed.step(g)
    t2.step(g)
    step_both(gpu, twin, g)
    assert snapshot(resumed) == snapshot(gpu)
    assert_identical(gpu, t2, "twin loaded from GPU")
    assert_identical(gpu, twin, "twin")


@pytest.mark.gpu
def test_bad_input_is_refused(device):
    """Bad settings and tampered quantized entries (4-bit codes packed, or one per byte as format 3 held them)
    are refused naming the entry, and change nothing."""
    params = make_params([5001, 3])
    with pytest.raises(ValueError, match="state_bits=8 is not supported.*Adam, AdamW, Lion"):
        rlx_gpu.LAMB(params, state_bits=8, device=device)
    with pytest.raises(ValueError, match="state_bits must be None, 8 or 4"):
        rlx_gpu.AdamW(params, state_bits=3, device=device)
    with pytest.raises(ValueError, match="min_quantized_size"):
        rlx_gpu.reference.SGD(params, state_bits=8, min_quantized_size=-1)
    opt = rlx_gpu.AdamW(params, state_bits=4, device=device)
    opt.step(make_grads(params, np.random.default_rng(0)))
    before, sd = snapshot(opt), opt.state_dict()
    bad = {k: dict(v) for k, v in sd["state"].items()}
    one_per_byte = quant.element_codes(sd["state"]["t0"]["exp_avg_codes"], (5001,), 4)
    bad["t0"]["exp_avg_codes"] = one_per_byte + 16
    with pytest.raises(ValueError, match="codes >= 16"):
        opt.load_state_dict(dict(sd, state=bad))
    bad["t0"]["exp_avg_codes"] = sd["state"]["t0"]["exp_avg_codes"].copy()
    bad["t0"]["exp_avg_codes"][-1] |= 0x50  # the high nibble after the 5001st code
    with pytest.raises(ValueError, match="exp_avg_codes of 't0' has a nonzero padding nibble"):
        opt.load_state_dict(dict(sd, state=bad))
    bad["t0"]["exp_avg_codes"] = sd["state"]["t0"]["exp_avg_codes"][:-1]
    with pytest.raises(ValueError, match=r"exp_avg_codes of 't0' must be uint8 of shape \(2501,\) or \(5001,\)"):
        opt.load_state_dict(dict(sd, state=bad))
    bad["t0"] = dict(sd["state"]["t0"], exp_avg_absmax=sd["state"]["t0"]["exp_avg_absmax"][:-1])
    with pytest.raises(ValueError, match=r"exp_avg_absmax of 't0' must be float32 of shape \(40,\)"):
        opt.load_state_dict(dict(sd, state=bad))
    bad["t0"] = dict(sd["state"]["t0"], exp_avg_qmap=quant.qmap(4, False).copy())
    with pytest.raises(ValueError, match="signed 8-bit or 4-bit map"):
        opt.load_state_dict(dict(sd, state=bad))
    bad["t0"] = {k: v for k, v in sd["state"]["t0"].items() if k != "exp_avg_absmax"}
    with pytest.raises(ValueError, match="not all"):
        opt.load_state_dict(dict(sd, state=bad))
    assert snapshot(opt) == before


@pytest.mark.gpu
@pytest.mark.parametrize("bits,limit", [(8, 2.05), (4, 1.07)])
def test_memory_per_parameter(bits, limit, device):
    opt = rlx_gpu.AdamW({"w": np.zeros((1024, 1024), np.float32)}, state_bits=bits, device=device)
    opt.step({"w": np.ones((1024, 1024), np.float32)})
    m = opt.memory()
    assert m["state_per_param"] <= limit, m
    assert m["params"] == m["grads"] == 4 * 2 ** 20


def _task():
    """A real fit: a 32-256-256-1 ReLU network regressing a noisy two-layer teacher (label noise 0.5) on 65,536
    samples, minibatches of 256, 300 steps (about one epoch: the training loss is the held-out loss, not a
    memorised one). The 256x256 and 32x256 weights are quantized; biases and the head keep float32 state."""
    r0 = np.random.default_rng(0)
    n, d = 65536, 32
    x = r0.standard_normal((n, d)).astype(np.float32)
    t1, t2 = r0.standard_normal((d, 64)) / np.sqrt(d), r0.standard_normal((64, 1)) / 4
    y = (np.tanh(x @ t1) @ t2 + 0.5 * r0.standard_normal((n, 1))).astype(np.float32)
    r = np.random.default_rng(1)
    init = {"w1": (r.standard_normal((d, 256)) / np.sqrt(d)).astype(np.float32), "b1": np.zeros(256, np.float32),
            "w2": (r.standard_normal((256, 256)) / 16).astype(np.float32), "b2": np.zeros(256, np.float32),
            "w3": (r.standard_normal((256, 1)) / 16).astype(np.float32), "b3": np.zeros(1, np.float32)}
    return x, y, init


def _loss_grad(p, xb, yb):
    h1 = np.maximum(xb @ p["w1"] + p["b1"], 0)
    h2 = np.maximum(h1 @ p["w2"] + p["b2"], 0)
    diff = h2 @ p["w3"] + p["b3"] - yb
    dz = 2 * diff / len(xb)
    dh2 = dz @ p["w3"].T * (h2 > 0)
    dh1 = dh2 @ p["w2"].T * (h1 > 0)
    g = {"w3": h2.T @ dz, "b3": dz.sum(0), "w2": h1.T @ dh2, "b2": dh2.sum(0), "w1": xb.T @ dh1, "b1": dh1.sum(0)}
    return float(np.mean(diff * diff)), {k: v.astype(np.float32) for k, v in g.items()}


@pytest.mark.gpu
def test_quantized_adamw_trains_as_float32(device):
    """Final loss over the whole set: 8-bit within 3% of float32 AdamW, 4-bit within 5% (measured on llvmpipe:
    +0.0-0.1% and +0.7-0.9% over seeds 2-4)."""
    x, y, init = _task()
    final = {}
    for bits in (None, 8, 4):
        opt = rlx_gpu.AdamW(init, lr=1e-3, state_bits=bits, device=device)
        if bits:
            assert {opt._where[opt._index[n]][0].sig.qbits for n in ("w1", "w2")} == {bits}
        rng, p = np.random.default_rng(2), dict(init)
        for _ in range(300):
            i = rng.integers(0, len(x), 256)
            opt.step(_loss_grad(p, x[i], y[i])[1])
            p = opt.read_params()
        final[bits] = _loss_grad(p, x, y)[0]
    assert final[None] < 0.45  # it learned (the noise floor is 0.25; predicting 0 gives about 0.55)
    assert final[8] <= 1.03 * final[None], final
    assert final[4] <= 1.05 * final[None], final


@pytest.mark.gpu
def test_grad_scaler_skips_without_touching_codes(device):
    """A GradScaler step whose scaled grads overflow is skipped on the device: codes, absmax, params and step
    counts bit-identical; the next steps agree with the twin stepping the unscaled grads."""
    params, gpu, twin = _pair("AdamW", {}, 8, device, sizes=[5000, 9])
    scaler = rlx_gpu.GradScaler(init_scale=2.0 ** 4)
    rng = np.random.default_rng(9)
    for s in range(6):
        g = make_grads(params, rng)
        if s == 3:
            g["t0"][5] = np.inf
            before = snapshot(gpu)
        scale = np.float32(scaler.get_scale())
        if s != 3 and not exact_adapter(gpu):
            twin.load_state_dict(gpu.state_dict(), params=gpu.read_params())
        scaler.step(gpu, {n: v * scale for n, v in g.items()})
        scaler.update()
        if s == 3:
            assert gpu.last_step_skipped and snapshot(gpu) == before
        else:
            twin.step({n: v * scale for n, v in g.items()}, loss_scale=float(scale))
    assert scaler.get_scale() == 8.0
    assert_identical(gpu, twin, "GradScaler")


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("cls_name,opts", [("AdamW", {}), ("SGD", {"momentum": 0.9}), ("RMSprop", {}), ("Lion", {})])
def test_extreme_values(cls_name, opts, bits, device):
    """Grads from 1e-30 to 1e30, an inf, a NaN and denormals without skipping: NaN and inf states quantize and
    read back as the twin's (a NaN block reads back NaN; an infinite absmax takes the bisection)."""
    rng = np.random.default_rng(11)
    params = {"a": rng.standard_normal(5000).astype(np.float32)}
    gpu = getattr(rlx_gpu, cls_name)(params, state_bits=bits, **opts, device=device)
    twin = getattr(rlx_gpu.reference, cls_name)(params, state_bits=bits, **opts)
    for s in range(6):
        g = rng.standard_normal(5000).astype(np.float32) * np.float32(10.0 ** rng.integers(-30, 30))
        g[3] = np.inf if s == 2 else g[3]
        g[700] = np.nan if s == 3 else g[700]
        g[1000:1300] = 1e-40 if s == 4 else g[1000:1300]
        step_both(gpu, twin, {"a": g})
    if exact_adapter(gpu):
        assert_identical(gpu, twin, f"{cls_name} extremes")



@pytest.mark.gpu
def test_quantized_into_16_bit_states(device):
    """A quantized state loads into an optimizer that keeps that tensor's states in bfloat16 (rounded to nearest
    even, no cast needed). (Every absmax word is valid: its sign bit is a flag.)"""
    params = make_params([5000], seed=12)
    q = rlx_gpu.AdamW(params, state_bits=8, device=device)
    q.step(make_grads(params, np.random.default_rng(0)))
    sd = q.state_dict()
    bf = rlx_gpu.AdamW(params, state_dtype="bfloat16", device=device)
    bf.load_state_dict(sd)
    got = bf.state_dict()["state"]["t0"]["exp_avg"]
    want = q.state_dict(dequantize=True)["state"]["t0"]["exp_avg"].astype(ml_dtypes.bfloat16)
    assert got.dtype == ml_dtypes.bfloat16 and np.array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.gpu
def test_torch_state_dict_of_a_quantized_optimizer(device):
    """to_torch_state_dict gives torch's float32 moments (dequantized); from_torch_state_dict quantizes them."""
    torch = pytest.importorskip("torch", reason="torch.optim is the other side")
    params = make_params([5000, 7], seed=13)
    q = rlx_gpu.AdamW(params, state_bits=8, device=device)
    q.step(make_grads(params, np.random.default_rng(1)))
    sd = rlx_gpu.to_torch_state_dict(q)
    tps = [torch.nn.Parameter(torch.tensor(v)) for v in params.values()]
    to = torch.optim.AdamW(tps)
    to.load_state_dict(sd)
    deq = q.state_dict(dequantize=True)["state"]["t0"]["exp_avg"]
    assert np.array_equal(to.state[tps[0]]["exp_avg"].numpy(), deq)
    back = rlx_gpu.AdamW(params, state_bits=8, device=device)
    back.load_state_dict(rlx_gpu.from_torch_state_dict(to.state_dict(), back))
    assert np.array_equal(back.state_dict(dequantize=True)["state"]["t0"]["exp_avg_sq"],
                          q.state_dict(dequantize=True)["state"]["t0"]["exp_avg_sq"])
