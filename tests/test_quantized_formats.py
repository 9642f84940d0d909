"""Quantized states in state dicts and checkpoints (issue 22, "Lossless state in every format"): codes and absmax
kept bit for bit, 4-bit codes two per byte, checkpoint format 4 with format 3 files still loading; the maps and the
rounding rule against bitsandbytes' and torchao's own code, and ports of their save/reload checks
(bitsandbytes tests/test_optim.py test_optimizer8bit, torchao test/prototype/test_low_bit_optim.py
test_optim_smoke) with their thresholds."""
import io
import pickle
from pathlib import Path

import numpy as np
import pytest

import rlx_gpu
from rlx_gpu.core import quant
from helpers import make_grads, make_params, snapshot

FIXTURES = Path(__file__).parent / "fixtures"


def _bytes(sd) -> dict:
    """Every array of a state dict's state as bytes (with its dtype and shape), steps as they are."""
    return {n: {k: (v if k == "step" else (np.asarray(v).dtype.str, np.shape(v), np.asarray(v).tobytes()))
                for k, v in st.items()} for n, st in sd["state"].items()}


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
def test_state_dicts_hold_codes_and_round_trip_bit_exactly(bits, device):
    """state_dict() holds each quantized state as codes (uint8), absmax words (float32) and its map, as
    bitsandbytes keeps state1/absmax1/qmap1; through pickle and np.savez into a new optimizer, GPU -> GPU,
    GPU -> twin -> GPU, every byte comes back, and the next step is the same. dequantize=True gives float32."""
    params = make_params([5001, (64, 96), 7], seed=8)
    gpu = rlx_gpu.AdamW(params, state_bits=bits, device=device)
    rng = np.random.default_rng(9)
    for s in range(4):
        g = make_grads(params, rng)
        g["t0"][3] = 1e25 if s == 1 else g["t0"][3]  # (an absmax word with its +inf flag)
        gpu.step(g)
    sd = gpu.state_dict()
    st = sd["state"]["t0"]
    assert sorted(st) == ["exp_avg_absmax", "exp_avg_codes", "exp_avg_qmap", "exp_avg_sq_absmax", "exp_avg_sq_codes",
                          "exp_avg_sq_qmap", "step"]
    assert st["exp_avg_codes"].dtype == np.uint8 and st["exp_avg_absmax"].dtype == np.float32
    assert "exp_avg" in sd["state"]["t2"] and "exp_avg_codes" not in sd["state"]["t2"]  # (7 elements: float32)
    deq = gpu.state_dict(dequantize=True)["state"]["t0"]
    assert deq["exp_avg"].dtype == np.float32 and deq["exp_avg"].shape == (5001,) and "exp_avg_codes" not in deq
    buf = io.BytesIO()
    np.savez(buf, **{f"{n}/{k}": v for n, s_ in sd["state"].items() for k, v in s_.items() if k != "step"})
    arrays = np.load(io.BytesIO(buf.getvalue()))
    saved = dict(sd, state={n: {k: (v if k == "step" else arrays[f"{n}/{k}"]) for k, v in s_.items()}
                            for n, s_ in sd["state"].items()})
    for copy in (pickle.loads(pickle.dumps(sd)), saved):
        other = rlx_gpu.AdamW(params, state_bits=bits, device=device)
        other.load_state_dict(copy, params=gpu.read_params())
        assert _bytes(other.state_dict()) == _bytes(sd)
    twin = rlx_gpu.reference.AdamW(params, state_bits=bits)
    twin.load_state_dict(sd, params=gpu.read_params())
    assert _bytes(twin.state_dict()) == _bytes(sd)
    back = rlx_gpu.AdamW(params, state_bits=bits, device=device)
    back.load_state_dict(twin.state_dict(), params=twin.params)
    assert _bytes(back.state_dict()) == _bytes(sd)
    g = make_grads(params, rng)
    gpu.step(g)
    back.step(g)
    other.step(g)
    assert snapshot(back) == snapshot(gpu) == snapshot(other)


@pytest.mark.gpu
@pytest.mark.parametrize("bits,limit", [(8, 2.04), (4, 1.07)])
def test_state_dict_bytes_per_element(bits, limit, device):
    """4-bit codes are packed two per byte in state dicts and checkpoints (ceil(n / 2) bytes, flat, low nibble
    first: a 4-bit AdamW's state dict holds 1.06 bytes per element, 2.06 before); 8-bit codes keep the param's
    shape (bitsandbytes' state1). The one-code-per-byte layout of format 3 still loads, to the same state."""
    shape = (1023, 1025)
    params = {"w": np.random.default_rng(10).standard_normal(shape).astype(np.float32)}
    opt = rlx_gpu.AdamW(params, state_bits=bits, device=device)
    opt.step({"w": np.random.default_rng(11).standard_normal(shape).astype(np.float32)})
    st = opt.state_dict()["state"]["w"]
    n = params["w"].size
    assert st["exp_avg_codes"].shape == (shape if bits == 8 else ((n + 1) // 2,))
    per = sum(np.asarray(v).nbytes for k, v in st.items() if k != "step") / n
    assert per <= limit, per
    codes = quant.element_codes(st["exp_avg_sq_codes"], shape, bits)
    deq = opt.state_dict(dequantize=True)["state"]["w"]["exp_avg_sq"]
    assert np.array_equal(quant.dequantize(codes, st["exp_avg_sq_absmax"], bits, False), deq)
    if bits == 4:
        old = dict(st, **{s + "_codes": quant.element_codes(st[s + "_codes"], shape, 4)
                          for s in ("exp_avg", "exp_avg_sq")})
        other = rlx_gpu.AdamW(params, state_bits=4, device=device)
        other.load_state_dict({"state": {"w": old}, "param_groups": opt.state_dict()["param_groups"]})
        assert _bytes(other.state_dict()) == _bytes(opt.state_dict())


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_version_3_checkpoints_still_load(bits, twin, device, tmp_path):
    """tests/fixtures/checkpoint_v3_adamw_{8,4}bit.npz were written by the format 3 code (4-bit codes one per byte;
    the twin, 3 steps of a 31x31 weight and a bias, state_bits with min_quantized_size=512): they load with every
    code and absmax word of the file, save as format 4 (4-bit codes packed), and that file loads to the same."""
    path = FIXTURES / f"checkpoint_v3_adamw_{bits}bit.npz"
    z = np.load(path)
    kw = {} if twin else {"device": device}
    cls = rlx_gpu.reference.AdamW if twin else rlx_gpu.AdamW
    got = cls.load(path, **kw)
    st = got.state_dict()["state"]["fc.weight"]
    for s in ("exp_avg", "exp_avg_sq"):
        assert np.array_equal(quant.element_codes(st[s + "_codes"], (31, 31), bits), z[f"state/0/{s}_codes"])
        assert st[s + "_absmax"].tobytes() == z[f"state/0/{s}_absmax"].tobytes()
    assert got.read_params()["fc.weight"].tobytes() == z["param/0"].tobytes()
    assert got.state_dict()["state"]["fc.bias"]["exp_avg"].tobytes() == z["state/1/exp_avg"].tobytes()
    got.save(tmp_path / "v4.npz")
    z4 = np.load(tmp_path / "v4.npz")
    assert __import__("json").loads(bytes(z4["__meta__"]))["version"] == 4
    assert z4["state/0/exp_avg_codes"].shape == ((31, 31) if bits == 8 else (481,))
    again = cls.load(tmp_path / "v4.npz", **kw)
    assert _bytes(again.state_dict()) == _bytes(got.state_dict())
    g = {"fc.weight": np.ones((31, 31), np.float32), "fc.bias": np.ones(7, np.float32)}
    got.step(g)
    again.step(g)
    assert snapshot(got) == snapshot(again)


# -- the peers' own code as oracles -----------------------------------------------------------------------------
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("signed", [True, False])
def test_maps_and_rule_are_the_peers(bits, signed):
    """The maps are bitsandbytes' create_dynamic_map (8-bit) and torchao's (4-bit: create_dynamic_map(True, 3, 4)
    and linspace(0, 1, 17)[1:]); the codes are torchao's nearest entry (quantize_8bit/4bit_with_qmap of
    v / |absmax|, of -v in a block stored negated; a tie at a midpoint goes down here, up there), but for the one
    documented difference: a positive value whose nearest 8-bit unsigned entry is 0 gets code 1; 8-bit codes read
    back as bitsandbytes' dequantize_blockwise."""
    pytest.importorskip("torch", reason="the peers run on torch")
    import torch
    ao = pytest.importorskip("torchao.optim.quant_utils", reason="torchao is the oracle")
    bnbf = pytest.importorskip("bitsandbytes.functional", reason="bitsandbytes is the oracle")
    want = (bnbf.create_dynamic_map(signed=signed).numpy() if bits == 8 else
            np.array(ao.create_dynamic_map(True, 3, 4), np.float32) if signed else torch.linspace(0, 1, 17)[1:].numpy())
    assert np.array_equal(quant.qmap(bits, signed), want)
    B, nb = quant.BLOCK[bits], 400
    rng = np.random.default_rng(12)
    x = (rng.standard_normal(nb * B) * np.repeat(10.0 ** rng.integers(-10, 10, nb), B)).astype(np.float32)
    x = x if signed else np.abs(x)
    x[5:9] = np.float32(1e-9) * np.abs(x[:B]).max()  # nearest entry 0 (or the smallest)
    codes, words = quant.quantize(x, bits, signed)
    neg = np.repeat(words < 0, B)
    a = np.repeat(np.abs(words), B)
    xn = (np.where(neg, -x, x) / a).astype(np.float32)
    q = ao.quantize_8bit_with_qmap if bits == 8 else ao.quantize_4bit_with_qmap
    ref = q(torch.tensor(xn), torch.tensor(quant.qmap(bits, signed))).numpy()
    differ = np.flatnonzero(ref != codes)
    mids = quant.midpoints(bits, signed)
    at_mid = a * mids[np.minimum(codes, mids.size - 1)] == np.where(neg, -x, x)
    tie = (ref.astype(int) == codes.astype(int) + 1) & at_mid
    differ = differ[~tie[differ]]  # (a value exactly at a midpoint takes the code below; torchao's, above)
    if bits == 8 and not signed:
        assert list(differ) == [5, 6, 7, 8] and set(codes[differ]) == {1} and set(ref[differ]) == {0}
    else:
        assert differ.size == 0, (differ, codes[differ], ref[differ])
    assert signed == bool(neg.any())
    if bits == 8:
        back = bnbf.dequantize_blockwise(torch.tensor(codes), absmax=torch.tensor(np.abs(words)),
                                         code=torch.tensor(quant.qmap(8, signed)), blocksize=256).numpy()
        assert np.array_equal(np.where(neg, -back, back), quant.dequantize(codes, words, 8, signed))


# bitsandbytes' test_optimizer8bit: (name, its 32-bit reference, our options, the state names)
BNB = [("Adam", lambda t, ps: t.optim.Adam(ps), {}, ("exp_avg", "exp_avg_sq")),
       ("SGD", lambda t, ps: t.optim.SGD(ps, 0.01, 0.9), {"lr": 0.01, "momentum": 0.9}, ("momentum_buffer",)),
       ("RMSprop", lambda t, ps: t.optim.RMSprop(ps, 0.01, 0.9), {"lr": 0.01, "alpha": 0.9}, ("square_avg",))]


BNB_CASES = [(b, dim2) for b in BNB for dim2 in ((32, 1024, 4097) if b[0] == "Adam" else (32, 1024))]


@pytest.mark.gpu
@pytest.mark.parametrize("case,dim2", BNB_CASES, ids=[f"{b[0]}-{d}" for b, d in BNB_CASES])
def test_bitsandbytes_optimizer8bit(case, dim2, device):
    """bitsandbytes' test_optimizer8bit with its thresholds, against torch.optim float32 (params (1024, dim2) of
    randn * 0.1, grads randn * 0.01, 50 steps): per step fewer than 20 state entries off the float32 state by more
    than atol 3e-3 + rtol 1e-3, mean |p - p32| < 6e-5 and mean relative error < 6e-4; every 10 steps the state
    dict is saved (pickled) and loaded into a new optimizer: the codes, the map and the dequantized state
    identical, the params within 1e-5 + 1e-3 relative with no exception; then, as there, the float32 side takes
    the 8-bit side's params and dequantized state. bitsandbytes' sizes: dim2 32, 1024 and 4097 (Adam; SGD and
    RMSprop 32 and 1024, for CI's time: a (1024, 4097) step takes a second on llvmpipe). (Lion has no torch.optim
    reference; its twin's tests cover it.)"""
    torch = pytest.importorskip("torch", reason="torch.optim is the 32-bit reference")
    name, ref, opts, states = case
    rng = np.random.default_rng(dim2)
    p0 = (rng.standard_normal((1024, dim2)) * 0.1).astype(np.float32)
    p1 = torch.nn.Parameter(torch.tensor(p0))
    topt = ref(torch, [p1])
    make = lambda p: getattr(rlx_gpu, name)({"w": p}, state_bits=8, device=device, **opts)  # noqa: E731
    ours = make(p0)
    for i in range(50):
        g = (rng.standard_normal((1024, dim2)) * 0.01).astype(np.float32)
        p1.grad = torch.tensor(g)
        topt.step()
        ours.step({"w": g})
        deq = ours.state_dict(dequantize=True)["state"]["w"]
        for s in states:
            close = np.isclose(topt.state[p1][s].numpy(), deq[s], atol=3e-3, rtol=1e-3)
            assert (~close).sum() < 20, (i, s)
        p2 = ours.read_params()["w"]
        err = np.abs(p1.detach().numpy() - p2)
        assert err.mean() < 6e-5 and (err / (np.abs(p1.detach().numpy()) + 1e-9)).mean() < 6e-4, i
        if i % 10 == 0 and i > 0:
            sd = ours.state_dict()
            ours = make(p2)
            ours.load_state_dict(pickle.loads(pickle.dumps(sd)))
            again = ours.state_dict()
            for s in states:
                assert np.array_equal(again["state"]["w"][s + "_codes"], sd["state"]["w"][s + "_codes"])
                assert np.array_equal(again["state"]["w"][s + "_qmap"], sd["state"]["w"][s + "_qmap"])
                assert np.array_equal(ours.state_dict(dequantize=True)["state"]["w"][s], deq[s])
                close = np.isclose(topt.state[p1][s].numpy(), deq[s], atol=3e-3, rtol=1e-3)
                assert (~close).sum() < 20, (i, s)
            assert np.isclose(p1.detach().numpy(), ours.read_params()["w"], atol=1e-5, rtol=1e-3).all()
        with torch.no_grad():
            p1.copy_(torch.tensor(ours.read_params()["w"]))
            for s in states:
                topt.state[p1][s].copy_(torch.tensor(deq[s]))


@pytest.mark.gpu
@pytest.mark.parametrize("name,bits", [("Adam", 8), ("AdamW", 8), ("Adam", 4), ("AdamW", 4)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torchao_optim_smoke(name, bits, dtype, device, tmp_path):
    """torchao's test_optim_smoke: a Linear(32, 256)-ReLU-Linear(256, 32) model (both weights quantized), one
    step, the state dict through torch.save and torch.load into a second optimizer of a deep copy, two more steps
    of each: the params equal (torch.testing.assert_close's defaults; here bit for bit)."""
    torch = pytest.importorskip("torch", reason="the model is torch's")
    import copy
    dt = getattr(torch, dtype)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 32)).to(dtype=dt)
    optim = getattr(rlx_gpu, name)(model.parameters(), state_bits=bits, device=device)
    model(torch.randn(4, 32, dtype=dt)).sum().backward()
    optim.step()
    optim.zero_grad()
    torch.save(optim.state_dict(), tmp_path / "sd.pt")
    state_dict = torch.load(tmp_path / "sd.pt", weights_only=False)  # (a NumPy state dict: not torch's default)
    model2 = copy.deepcopy(model)
    optim2 = getattr(rlx_gpu, name)(model2.parameters(), state_bits=bits, device=device)
    optim2.load_state_dict(state_dict)
    for _ in range(2):
        x = torch.randn(4, 32, dtype=dt)
        for m, o in ((model, optim), (model2, optim2)):
            m(x).sum().backward()
            o.step()
            o.zero_grad()
    for p1, p2 in zip(model.parameters(), model2.parameters()):
        torch.testing.assert_close(p2, p1)
        assert torch.equal(p2, p1)


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
def test_torch_format_round_trips_bit_exactly(bits, device, tmp_path):
    """Issue 22: rlx_gpu.torch.AdamW(state_bits=...)'s torch-format state dict through torch.save and torch.load
    (weights_only) into a second optimizer gives the same state dict, tensor for tensor, and the same next steps
    bit for bit, whether it carries codes or float32 moments (those requantize to the same codes; before, 1-408
    codes per tensor moved by one step)."""
    torch = pytest.importorskip("torch", reason="the torch-format state dict")
    import copy
    import rlx_gpu.torch as rt
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 64))
    opt = rt.AdamW(model.parameters(), state_bits=bits, device=device)
    for _ in range(3):
        model(torch.randn(8, 64)).sum().backward()
        opt.step()
        opt.zero_grad()
    model2 = copy.deepcopy(model)
    opt2 = rt.AdamW(model2.parameters(), state_bits=bits, device=device)
    torch.save(opt.state_dict(), tmp_path / "sd.pt")
    opt2.load_state_dict(torch.load(tmp_path / "sd.pt"))
    a, b = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].keys() == b[k].keys()
        for s in a[k]:
            assert torch.equal(torch.as_tensor(a[k][s]), torch.as_tensor(b[k][s])), (k, s)
    x = torch.randn(8, 64)
    for m, o in ((model, opt), (model2, opt2)):
        m(x).sum().backward()
        o.step()
    for p1, p2 in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p1, p2)
