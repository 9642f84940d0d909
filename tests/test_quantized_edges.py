"""Block-quantized states at the edges (the rule: rlx_gpu/core/quant.py): a second moment that overflows to +inf
(issue 21 item 2), infinite first moments, second moments too small for their block, and dequantize -> quantize
round trips (issue 22). Each compares the GPU with its twin (bit for bit on the CPU adapter, else
test_quantized.assert_identical's tolerance) and, where the behaviour is float32's, with float32 rlx_gpu and
torch.optim."""
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu.core import quant
from test_quantized import assert_identical, exact_adapter, step_both

QCLASSES = [("AdamW", {}), ("SGD", {"momentum": 0.9}), ("Lion", {"lr": 1e-3}),
            ("RMSprop", {"centered": True, "momentum": 0.5})]


def _grads(n, steps, seed=1, edit=None):
    r = np.random.default_rng(seed)
    out = [r.standard_normal(n).astype(np.float32) for _ in range(steps)]
    for s, g in enumerate(out):
        if edit is not None:
            edit(s, g)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
def test_one_huge_grad_does_not_poison_its_block(bits, device):
    """Issue 21 item 2: one finite grad of 1e25 makes (1 - b2) g^2 overflow to +inf. That element's second moment
    stays +inf (float32's: its update is 0 from then on), its block keeps the scale of its finite values: 0 NaN
    params and the same frozen params (unchanged over a step, weight_decay=0) as float32 rlx_gpu.AdamW and
    torch.optim.AdamW: the element itself, nothing else (before: 8-bit 256 NaN, 4-bit 129 frozen). After 20 steps
    of lr 1e-3 the params are within 0.02 of float32's (measured: 0.011 in that block, whose other first moments
    read back as 0 while the 1e24 one sets its scale, as with any outlier; elsewhere 0.0004 8-bit, 0.006 4-bit)."""
    torch = pytest.importorskip("torch", reason="torch.optim.AdamW is the other side")
    n = 8192
    p0 = {"w": np.random.default_rng(0).standard_normal(n).astype(np.float32)}
    grads = _grads(n, 20, edit=lambda s, g: g.__setitem__(5, 1e25) if s == 0 else None)
    kw = dict(weight_decay=0.0)
    gpu = rlx_gpu.AdamW(p0, state_bits=bits, device=device, **kw)
    twin = rlx_gpu.reference.AdamW(p0, state_bits=bits, **kw)
    f32 = rlx_gpu.AdamW(p0, device=device, **kw)
    tp = torch.nn.Parameter(torch.tensor(p0["w"]))
    tor = torch.optim.AdamW([tp], **kw)
    for g in grads:
        before = [gpu.read_params()["w"], f32.read_params()["w"], tp.detach().numpy().copy()]
        step_both(gpu, twin, {"w": g})
        f32.step({"w": g})
        tp.grad = torch.tensor(g)
        tor.step()
    after = [gpu.read_params()["w"], f32.read_params()["w"], tp.detach().numpy()]
    for name, b, a in zip(("quantized", "float32", "torch"), before, after):
        assert not np.isnan(a).any(), name
        assert list(np.flatnonzero(a == b)) == [5], name  # frozen: the overflowed element only
    assert after[0][5] == p0["w"][5] == after[1][5] == after[2][5]
    assert_identical(gpu, twin, f"{bits}-bit, one grad of 1e25")
    assert_identical(gpu, twin, f"{bits}-bit, one grad of 1e25 (the GPU comparison)", exact=False)  # (a GPU's)
    st, deq = gpu.state_dict()["state"]["w"], gpu.state_dict(dequantize=True)["state"]["w"]
    assert deq["exp_avg_sq"][5] == np.inf and np.isfinite(np.delete(deq["exp_avg_sq"], 5)).all()
    assert st["exp_avg_sq_absmax"].view(np.uint32)[0] >> 31 == 1  # the block's +inf flag
    assert np.isfinite(st["exp_avg_sq_absmax"][0]) and st["exp_avg_sq_absmax"][1:].min() >= 0
    B = quant.BLOCK[bits]
    off = np.abs(after[0] - after[1])
    assert np.delete(off[:B], 5).max() < 0.02 and off[B:].max() < 0.02, (off[:B].max(), off[B:].max())


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("cls_name,opts", QCLASSES)
def test_an_infinite_grad_stays_in_its_element(cls_name, opts, bits, device):
    """+inf and -inf grads (no skip_nonfinite) in two blocks: the non-finite params are exactly float32's (the
    elements themselves, NaN or inf as float32 makes them); every other param is finite (before: the blocks' other
    params NaN). An infinite first moment or momentum reads back as its block's extreme finite magnitude."""
    n = 4096
    p0 = {"w": np.random.default_rng(2).standard_normal(n).astype(np.float32)}

    def edit(s, g):
        if s == 2:
            g[10], g[3000] = np.inf, -np.inf
    grads = _grads(n, 6, seed=3, edit=edit)
    gpu = getattr(rlx_gpu, cls_name)(p0, state_bits=bits, device=device, **opts)
    twin = getattr(rlx_gpu.reference, cls_name)(p0, state_bits=bits, **opts)
    f32 = getattr(rlx_gpu.reference, cls_name)(p0, **opts)
    for g in grads:
        step_both(gpu, twin, {"w": g})
        f32.step({"w": g})
    got, want = gpu.read_params()["w"], f32.params["w"]
    assert list(np.flatnonzero(~np.isfinite(got))) == list(np.flatnonzero(~np.isfinite(want))), cls_name
    assert list(np.flatnonzero(np.isnan(got))) == list(np.flatnonzero(np.isnan(want)))
    for s, v in gpu.state_dict(dequantize=True)["state"]["w"].items():
        if s in gpu.spec.quantizable and gpu.spec.quantizable[s]:
            assert np.isfinite(v).all(), s
    assert_identical(gpu, twin, f"{cls_name} {bits}-bit, infinite grads")
    assert_identical(gpu, twin, f"{cls_name} {bits}-bit, infinite grads (the GPU comparison)", exact=False)  # (a GPU's)


@pytest.mark.gpu
def test_a_tiny_second_moment_never_reads_zero(device):
    """Issue 22: an element whose grads are 2e-5 among grads of about 1 has a second moment below its 8-bit block's
    smallest code; when its grad becomes exactly 0, a v read back as 0 under a nonzero first moment made Adam step
    m / eps: 588 x lr (torchao's AdamW8bit does the same). A positive value never gets code 0 (it reads back as the
    smallest nonzero code, larger than it: the element steps less, as with the 4-bit map, which has no zero;
    bitsandbytes' CPU kernel behaves alike): every step of it stays below lr (float32: 1.0 and 0.9 x lr)."""
    n, lr = 4096, 1e-3
    p0 = {"w": np.random.default_rng(0).standard_normal(n).astype(np.float32)}
    grads = _grads(n, 12, edit=lambda s, g: g.__setitem__(7, 2e-5 if s < 10 else 0.0))
    kw = dict(lr=lr, weight_decay=0.0, state_bits=8)
    gpu, twin = rlx_gpu.AdamW(p0, device=device, **kw), rlx_gpu.reference.AdamW(p0, **kw)
    moves = []
    for s, g in enumerate(grads):
        b = gpu.read_params()["w"][7]
        step_both(gpu, twin, {"w": g})
        moves.append(abs(float(gpu.read_params()["w"][7]) - float(b)) / lr)
        st = gpu.state_dict()["state"]["w"]
        assert st["exp_avg_sq_codes"][7] >= 1, s
    assert max(moves) <= 1.0 and max(moves[10:]) < 0.1, moves
    assert_identical(gpu, twin, "tiny second moment")
    v = quant.quantize(np.array([1.0, 1e-30, 0.0, 1e-45] + [0.5] * 252, np.float32), 8, False)[0]
    assert list(v[:4]) == [255, 1, 0, 1]  # (a subnormal too; only 0 itself has code 0)


def _trip_states(opt) -> dict:
    return {n: {k: np.asarray(v).tobytes() for k, v in st.items() if k.endswith(("_codes", "_absmax"))}
            for n, st in opt.state_dict()["state"].items()}


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("cls_name,opts", QCLASSES)
def test_dequantized_round_trip_is_idempotent(cls_name, opts, bits, device):
    """state_dict(dequantize=True) -> load_state_dict into the same quantized setup (the optimizer itself, or a new
    one) gives back every code and absmax word bit for bit, after one trip and after 10 (before: absmax changed in
    the blocks whose largest magnitude was negative, and values drifted 0.7% (8-bit) or 11% (4-bit) a trip). The
    states hold blocks stored negated, and an AdamW block flagged for +inf."""
    n = 6000
    p0 = {"w": np.random.default_rng(4).standard_normal(n).astype(np.float32), "b": np.zeros(5, np.float32)}

    def edit(s, g):
        g *= np.float32(10.0) ** np.repeat(np.arange(-3, 3, dtype=np.float32), 1000)  # blocks of other scales
        if s == 1:
            g[17] = 1e25 if cls_name == "AdamW" else -50.0
    grads = _grads(n, 4, seed=5, edit=edit)
    gpu = getattr(rlx_gpu, cls_name)(p0, state_bits=bits, device=device, **opts)
    twin = getattr(rlx_gpu.reference, cls_name)(p0, state_bits=bits, **opts)
    for g in grads:
        step_both(gpu, twin, {"w": g, "b": np.ones(5, np.float32)})
    for opt in (gpu, twin):
        want = _trip_states(opt)
        fresh = type(opt)(p0, state_bits=bits, **opts, **({"device": device} if opt is gpu else {}))
        fresh.load_state_dict(opt.state_dict(dequantize=True))
        assert _trip_states(fresh) == want, f"{type(opt).__module__}: one trip into a new optimizer"
        for trip in range(10):
            opt.load_state_dict(opt.state_dict(dequantize=True))
            assert _trip_states(opt) == want, f"{type(opt).__module__}: trip {trip + 1}"
    words = {s: v.view(np.uint32) for s, v in gpu.state_dict()["state"]["w"].items() if s.endswith("_absmax")}
    assert any((w >> 31).any() for w in words.values())  # negated (signed) or +inf (unsigned) blocks


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
def test_subnormal_blocks_match_the_twin(bits, device):
    """A block whose largest magnitude is subnormal (below 2^-128, where 1 / absmax overflows to inf) takes the
    exact search on the GPU too (before: the table's guess from an infinite v / absmax, off by many codes). Off the
    CPU adapter a GPU may flush denormals to zero (docs/guides/reliability.md, Denormals): there the params within
    1e-30."""
    p0 = {"w": np.random.default_rng(6).standard_normal(4096).astype(np.float32)}
    g = (np.random.default_rng(7).standard_normal(4096) * 1e-39).astype(np.float32)
    g[:256] *= np.float32(1e-3)
    for cls_name, opts in (("SGD", {"momentum": 0.9}), ("AdamW", {})):
        gpu = getattr(rlx_gpu, cls_name)(p0, state_bits=bits, device=device, **opts)
        twin = getattr(rlx_gpu.reference, cls_name)(p0, state_bits=bits, **opts)
        for _ in range(2):
            step_both(gpu, twin, {"w": g})
        if exact_adapter(gpu):
            assert_identical(gpu, twin, f"{cls_name} {bits}-bit subnormal states")
        else:
            np.testing.assert_allclose(gpu.read_params()["w"], twin.params["w"], rtol=1e-5, atol=1e-30)
