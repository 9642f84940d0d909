"""rlx_gpu.linalg (batched GEMM, Newton-Schulz) against NumPy, and Muon: the twin against torch.optim.Muon with its
Newton-Schulz in float32 (torch runs it in bfloat16), the GPU against the twin, and everything around the step.

Tolerances: GEMM |gpu - float64| <= 2e-5 * max(1, max|ref|) (float32 sums of up to 200 terms in another order;
float16: see the float16 section below);
Newton-Schulz (5 steps) 5e-6 absolute (its entries are O(1)); Muon params 2e-6 and momentum buffers 1e-6 after 10
steps, twin vs torch and GPU vs twin (the NS sums run in other orders; the momentum is elementwise and exact)."""
import os

import numpy as np
import pytest

import rlx_gpu
from rlx_gpu import linalg
from rlx_gpu.linalg import record
from rlx_gpu.reference.muon import newton_schulz_np
from helpers import snapshot, steps_with_a_skip

pytestmark = pytest.mark.gpu


def _needs_f16(device):
    if "shader-f16" not in device.features:
        pytest.skip(f"{device.name} has no shader-f16")


@pytest.mark.parametrize("M,K,N,batch", [(64, 64, 64, None), (100, 37, 130, None), (5, 200, 3, 12), (1, 1, 1, 1),
                                         (130, 70, 65, 2), (64, 1, 64, None)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_against_numpy(M, K, N, batch, ta, tb, dtype, device):
    if dtype == np.float16:
        _needs_f16(device)
    rng = np.random.default_rng(M + K + N)
    sa, sb = ((K, M) if ta else (M, K)), ((N, K) if tb else (K, N))
    if batch:
        sa, sb = (batch, *sa), (batch, *sb)
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    ref = (np.swapaxes(a, -1, -2) if ta else a).astype(np.float64) @ (np.swapaxes(b, -1, -2) if tb else b)
    got = linalg.matmul(a, b, transpose_a=ta, transpose_b=tb, device=device)
    assert got.shape == ref.shape and got.dtype == dtype
    tol = 2e-5 * max(1.0, np.abs(ref).max()) if dtype == np.float32 else 3e-3 * np.abs(ref).max()
    assert np.abs(got - ref).max() <= tol


@pytest.mark.parametrize("M,K,N,batch", [(32, 3000, 96, 3), (128, 2000, 300, 2), (5, 700, 130, None)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_split_k(M, K, N, batch, ta, tb, device, monkeypatch):
    """Few tiles and a long K: chunks of K summed by workgroups of their own, then added in order
    (linalg.record.SPLIT; the QR's V^T X), against float64 NumPy with matmul's float32 tolerance, and within the
    same of the unsplit GEMM (other sums: not the same bits)."""
    rng = np.random.default_rng(K)
    sa, sb = ((K, M) if ta else (M, K)), ((N, K) if tb else (K, N))
    if batch:
        sa, sb = (batch, *sa), (batch, *sb)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    ref = (np.swapaxes(a, -1, -2) if ta else a).astype(np.float64) @ (np.swapaxes(b, -1, -2) if tb else b)
    assert record.split_k(M, N, K, batch or 1)[0] > 1
    got = linalg.matmul(a, b, transpose_a=ta, transpose_b=tb, device=device)
    monkeypatch.setattr(record, "SPLIT", False)
    assert record.split_k(M, N, K, batch or 1) == (1, K)
    whole = linalg.matmul(a, b, transpose_a=ta, transpose_b=tb, device=device)
    tol = 2e-5 * max(1.0, np.abs(ref).max())
    assert got.shape == ref.shape and np.abs(got - ref).max() <= tol and np.abs(got - whole).max() <= tol


def test_split_k_choice(monkeypatch):
    """Split only where few tiles (under SPLIT_BELOW) meet a long K; chunks of at least SPLIT_K k's (a multiple of
    8), no more than SPLIT_WORKGROUPS' worth, their partials within SPLIT_BYTES."""
    assert record.split_k(4096, 4096, 4096, 1) == (1, 4096)  # (many tiles)
    assert record.split_k(768, 768, 3072, 12) == (1, 3072)  # (Muon's X X^T of twelve 768 x 3072: 432 tiles)
    assert record.split_k(128, 640, 768, 60)[0] == 2  # (300 tiles: a block's V^T X of sixty 768-sides)
    assert record.split_k(32, 96, 300, 12) == (1, 300)  # (a short K)
    chunks, kc = record.split_k(32, 96, 3072, 12)
    assert chunks == 12 and kc == 256 and chunks * kc >= 3072
    chunks, kc = record.split_k(128, 2944, 3072, 12)  # (276 tiles: two chunks)
    assert (chunks, kc) == (2, 1536)
    monkeypatch.setattr(record, "SPLIT_BYTES", 2 * 4 * 12 * 128 * 2944 - 1)  # (two slabs do not fit: not split)
    assert record.split_k(128, 2944, 3072, 12) == (1, 3072)


def test_matmul_device_tensors_and_errors(device):
    rng = np.random.default_rng(1)
    opt = rlx_gpu.SGD({"a": rng.standard_normal((30, 20)).astype(np.float32),
                       "b": rng.standard_normal((20, 10)).astype(np.float32)}, device=device)
    out = linalg.matmul(opt.params["a"], opt.params["b"])
    assert isinstance(out, rlx_gpu.DeviceTensor) and out.shape == (30, 10)
    np.testing.assert_allclose(out.numpy(), opt.params["a"].numpy() @ opt.params["b"].numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        linalg.matmul(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32), device=device)
    with pytest.raises(TypeError, match="float32"):
        linalg.matmul(np.ones((3, 4)), np.ones((4, 2), np.float32), device=device)
    with pytest.raises(ValueError, match="ns_steps"):
        linalg.newton_schulz_orth(np.ones((3, 4), np.float32), ns_steps=100, device=device)


@pytest.mark.parametrize("K", [52430, 70000, 600000])
def test_matmul_with_a_long_k(K, device):
    """issue 21 item 4: on Mesa 22.3.6's lavapipe, whose loops stop after 65,535 iterations, matmul(ones((1, K)),
    ones((K, 1))) gave 52429 for every K >= 52430: a K past linalg's KSPLIT is now summed in short loops (few
    outputs: chunks over many workgroups, then their sum; more: split K, or slabs of KSPLIT accumulated into C), every
    transpose; random operands against float64 NumPy (2e-5 of the largest |entry| times sqrt(K / 1000): sums of K
    float32 products in another order)."""
    ones = np.ones((1, K), np.float32)
    for a, b, ta, tb in ((ones, ones.T.copy(), False, False), (ones.T.copy(), ones.T.copy(), True, False),
                         (ones, ones, False, True)):
        assert linalg.matmul(a, b, transpose_a=ta, transpose_b=tb, device=device).ravel().tolist() == [K]
    rng = np.random.default_rng(K)
    m, n = (3, 5) if K > 60000 else (9, 11)  # (15 outputs: chunks; 99: slabs)
    for ta, tb in ((False, False), (True, True)):
        a = rng.standard_normal((K, m) if ta else (m, K)).astype(np.float32)
        b = rng.standard_normal((n, K) if tb else (K, n)).astype(np.float32)
        ref = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
        got = linalg.matmul(a, b, transpose_a=ta, transpose_b=tb, device=device)
        assert np.abs(got - ref).max() <= 2e-5 * np.abs(ref).max() * np.sqrt(K / 1000)
    if "shader-f16" in device.features and K < 60000:  # (f16: slabs, each rounded to f16; sums of ones stay exact)
        h = linalg.matmul(np.ones((1, 20000), np.float16), np.ones((20000, 1), np.float16), device=device)
        assert h.ravel().tolist() == [20000.0]


def test_a_muon_step_on_a_very_wide_matrix(device):
    """issue 21 item 4: a Muon step on a (2, 600000) matrix (81% off the twin on Mesa 22.3.6 before: X X^T has
    K = 600,000) against the twin (params 2e-6, as test_muon_against_torch_and_twin); and the Frobenius scaling of
    matrices past FROB_ONE elements (two passes: one workgroup a matrix looped past 65,535 times) against NumPy."""
    rng = np.random.default_rng(5)
    p0 = {"w": (rng.standard_normal((2, 600_000)) * 0.01).astype(np.float32)}
    gpu, twin = rlx_gpu.Muon(p0, lr=0.02, device=device), rlx_gpu.reference.Muon(p0, lr=0.02)
    g = {"w": rng.standard_normal((2, 600_000)).astype(np.float32)}
    gpu.step(g)
    twin.step(g)
    np.testing.assert_allclose(gpu.params["w"].numpy(), twin.params["w"], rtol=0, atol=2e-6)
    x = rng.standard_normal((2, 4_600_000)).astype(np.float32)
    want = x / np.linalg.norm(x.astype(np.float64))
    assert np.abs(linalg.newton_schulz_orth(x, ns_steps=0, device=device) - want).max() <= 1e-6 * np.abs(want).max()
    if "shader-f16" in device.features:
        got = linalg.newton_schulz_orth(x, ns_steps=0, ns_dtype="float16", device=device)
        assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()


def test_matmul_operand_past_the_max_binding(device):
    """issue 21 item 13: an operand past the max storage binding was a raw wgpu error; it is a ValueError naming
    the operand, before anything is uploaded (a result past it, likewise)."""
    big = np.zeros((device.max_storage_binding // 4096 + 1, 1024), np.float32)
    with pytest.raises(ValueError, match=r"rlx_gpu.linalg: a holds \d+ bytes, more than one storage binding"):
        linalg.matmul(big, np.ones((1024, 2), np.float32), device=device)
    with pytest.raises(ValueError, match=r"b holds \d+ bytes"):
        linalg.matmul(np.ones((2, big.shape[0]), np.float32), big, device=device)
    with pytest.raises(ValueError, match="the result .* does not fit one storage binding"):
        linalg.matmul(np.ones((big.shape[0], 1), np.float32), np.ones((1, 1024), np.float32), device=device)
    with pytest.raises(ValueError, match="x holds"):
        linalg.newton_schulz_orth(big, device=device)


@pytest.mark.parametrize("shape", [(64, 64), (100, 30), (30, 100), (130, 70), (3, 5, 7), (12, 20, 33), (1, 1, 9)])
def test_newton_schulz_against_numpy(shape, device):
    g = np.random.default_rng(len(shape) + shape[-1]).standard_normal(shape).astype(np.float32)
    got = linalg.newton_schulz_orth(g, device=device)
    ref = np.stack([newton_schulz_np(x) for x in g]) if g.ndim == 3 else newton_schulz_np(g)
    assert np.abs(got - ref).max() <= 5e-6
    sv = np.linalg.svd(got.reshape(-1, *shape[-2:])[0], compute_uv=False)
    assert sv.max() < 1.5 and (min(shape[-2:]) == 1 or sv.min() > 0.2)  # Muon's "roughly orthogonal"


def _ns32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim._muon._zeropower_via_newtonschulz in float32 (the oracle the issue names)."""
    import torch
    a, b, c = ns_coefficients
    x = grad.float()
    tall = grad.size(0) > grad.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        g = x @ x.T
        x = torch.addmm(x, torch.addmm(g, g, g, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


SHAPES = {"a": (40, 24), "b": (24, 40), "c": (40, 24), "d": (130, 70)}


@pytest.mark.parametrize("opts", [{}, {"nesterov": False, "adjust_lr_fn": "match_rms_adamw", "weight_decay": 0.0},
                                  {"momentum": 0.9, "ns_steps": 3, "adjust_lr_fn": "original"}])
def test_muon_against_torch_and_twin(opts, device, monkeypatch):
    torch = pytest.importorskip("torch", reason="torch.optim.Muon is the oracle")
    import torch.optim._muon as tm
    monkeypatch.setattr(tm, "_zeropower_via_newtonschulz", _ns32)
    rng = np.random.default_rng(3)
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    tps = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in params.items()}
    to = torch.optim.Muon(list(tps.values()), lr=0.02, **opts)
    twin = rlx_gpu.reference.Muon(params, lr=0.02, **opts)
    gpu = rlx_gpu.Muon(params, lr=0.02, **opts, device=device)
    for s in range(10):
        g = {k: rng.standard_normal(v).astype(np.float32) for k, v in SHAPES.items() if not (s == 3 and k == "c")}
        for k, t in tps.items():
            t.grad = torch.tensor(g[k]) if k in g else None
        to.step()
        twin.step(g)
        gpu.step(g)
    sd = gpu.state_dict()["state"]
    for k, t in tps.items():
        np.testing.assert_allclose(twin.params[k], t.detach().numpy(), rtol=0, atol=2e-6, err_msg=f"twin {k}")
        np.testing.assert_allclose(twin.state[k]["momentum_buffer"], to.state[t]["momentum_buffer"].numpy(),
                                   rtol=0, atol=1e-6)
        np.testing.assert_allclose(gpu.params[k].numpy(), twin.params[k], rtol=0, atol=2e-6, err_msg=f"gpu {k}")
        np.testing.assert_allclose(sd[k]["momentum_buffer"], twin.state[k]["momentum_buffer"], rtol=0, atol=1e-6)
        assert sd[k]["step"] == twin.state[k]["step"] == (9 if k == "c" else 10)


def test_muon_around_the_step(device, tmp_path):
    """Clip, an inf step skipped (nothing changes), GradScaler, lr_scale, a schedule, checkpoint resume bit for bit,
    and tensors that are not 2-D refused with their names."""
    rng = np.random.default_rng(4)
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    kw = dict(lr=0.02, clip_grad_norm=5.0, skip_nonfinite=True, lr_scale={"b": 0.5})
    gpu, twin = rlx_gpu.Muon(params, **kw, device=device), rlx_gpu.reference.Muon(params, **kw)
    sched = rlx_gpu.schedules.StepLR(gpu, step_size=2, gamma=0.5)
    for s in range(6):
        g = {k: rng.standard_normal(v).astype(np.float32) for k, v in SHAPES.items()}
        if s == 2:
            g["d"][0, 0] = np.inf
            before = snapshot(gpu)
        twin.set_lr(gpu.param_groups[0]["lr"])
        gpu.step(g)
        twin.step(g)
        sched.step()
        if s == 2:
            assert gpu.last_step_skipped and twin.last_step_skipped and snapshot(gpu) == before
    for k in SHAPES:
        np.testing.assert_allclose(gpu.params[k].numpy(), twin.params[k], rtol=0, atol=2e-6, err_msg=k)
    path = tmp_path / "m.npz"
    gpu.save(path)
    again = rlx_gpu.Optimizer.load(path, device=device)
    g = {k: rng.standard_normal(v).astype(np.float32) for k, v in SHAPES.items()}
    gpu.step(g)
    again.step(g)
    assert snapshot(again) == snapshot(gpu)
    scaler = rlx_gpu.GradScaler(init_scale=4.0)
    scaler.step(gpu, {k: v * np.float32(4.0) for k, v in g.items()})
    scaler.update()
    with pytest.raises(ValueError, match=r"'bias' has shape \(3,\)"):
        rlx_gpu.Muon({"w": np.ones((3, 3), np.float32), "bias": np.ones(3, np.float32)}, device=device)
    with pytest.raises(ValueError, match="adjust_lr_fn"):
        rlx_gpu.Muon(params, adjust_lr_fn="x", device=device)


def test_checked_steps_with_groups_of_other_settings(device):
    """skip_nonfinite with three groups of one shape but different eps, and ns_steps raised after the first checked
    step: the indirect-dispatch buffer is sized for the worst case."""
    rng = np.random.default_rng(6)
    groups = [{"params": {k: rng.standard_normal((20, 12)).astype(np.float32)}, "eps": e}
              for k, e in (("a", 1e-7), ("b", 1e-6), ("c", 1e-5))]
    opt = rlx_gpu.Muon(groups, lr=0.02, skip_nonfinite=True, device=device)
    g = {k: rng.standard_normal((20, 12)).astype(np.float32) for k in "abc"}
    opt.step(g)
    opt.param_groups[0]["ns_steps"] = 12
    opt.step(g)
    assert not opt.last_step_skipped and opt.state_dict()["state"]["a"]["step"] == 2


# The float16 paths: "tiled" (shaders/gemm16.wgsl; llvmpipe has shader-f16, so CI runs it), "emulated" (the
# tensor-core GEMM's kernel with its fragment operations written out: CI runs it on llvmpipe) and "subgroup-matrix"
# (the tensor cores; where a Dawn device offers them, else skipped, or failed with RLX_GPU_REQUIRE_SUBGROUP_MATRIX=1).
# Tolerances, measured on llvmpipe: GEMM |gpu - float64| <= 3e-3 * max|ref| (f16 results: 2^-11 relative rounding,
# plus gemm16's f16 partial sums of 16 products; measured 4.5e-4 to 1.1e-3); Newton-Schulz against the float32
# iteration 6e-3 absolute on gemm16 (measured 1.5e-3 to 4.3e-3, where torch's own bfloat16 iteration is 2.7e-3 to
# 8.0e-3 off it) and 2.5e-3 on the tensor-core kernel (f32 sums; measured 6.6e-4 to 1.6e-3: tests/test_tc.py); Muon
# 10 steps at lr 0.02 against the float32 twin: params 1e-3 on gemm16 (measured 2.5e-4), 3e-4 on the tensor-core
# kernel (measured 6.6e-5), and against torch.optim.Muon with its own bfloat16 Newton-Schulz 2e-3 (measured 7.2e-4
# on both: torch's bfloat16 is the larger error); the momentum does not pass through Newton-Schulz: 1e-6.
F16_PATHS = ["tiled", "emulated", "subgroup-matrix"]
NS16_TOL = {"tiled": 6e-3, "emulated": 2.5e-3, "subgroup-matrix": 2.5e-3}
MUON16_TOL = {"tiled": 1e-3, "emulated": 3e-4, "subgroup-matrix": 3e-4}
SHAPES16 = {**SHAPES, "e": (64, 128), "f": (128, 64), "g": (64, 64)}  # (and whole blocks: D loaded as fragments)


def _f16_path(path, device, monkeypatch):
    """Make "auto" mean ``path`` for float16 work, or skip where the device cannot run it."""
    _needs_f16(device)
    if path == "subgroup-matrix" and linalg.tc.subgroup_matrix_size(device) is None:
        if os.environ.get(linalg.tc.REQUIRE_ENV, "") not in ("", "0"):
            pytest.fail(f"{linalg.tc.REQUIRE_ENV} is set but {device.name} offers no subgroup matrices")
        pytest.skip(f"{device.name} offers no subgroup matrices")
    monkeypatch.setenv(linalg.tc.PATH_ENV, path)
    assert linalg.gemm_path("float16", device) == path


@pytest.mark.parametrize("path", F16_PATHS)
@pytest.mark.parametrize("shape", [(64, 64), (100, 30), (30, 100), (256, 1024), (1024, 256), (3, 40, 70)])
def test_newton_schulz_f16_against_float32(shape, path, device, monkeypatch):
    _f16_path(path, device, monkeypatch)
    g = np.random.default_rng(len(shape) + shape[-1]).standard_normal(shape).astype(np.float32)
    ref = np.stack([newton_schulz_np(x) for x in g]) if g.ndim == 3 else newton_schulz_np(g)
    got = linalg.newton_schulz_orth(g, ns_dtype="float16", device=device)
    assert got.dtype == np.float32 and np.abs(got - ref).max() <= NS16_TOL[path]
    with pytest.raises(ValueError, match="ns_dtype"):
        linalg.newton_schulz_orth(g, ns_dtype="bfloat16", device=device)


@pytest.mark.parametrize("path", F16_PATHS)
def test_muon_f16_against_the_float32_twin_and_torch(path, device, monkeypatch):
    """ns_dtype="float16" on each path: 10 steps against the float32 twin and against torch.optim.Muon (its bfloat16
    Newton-Schulz, unpatched), every shape of SHAPES16 in one step, a tensor missing a grad at step 3."""
    _f16_path(path, device, monkeypatch)
    torch = pytest.importorskip("torch", reason="torch.optim.Muon is an oracle")
    rng = np.random.default_rng(9)
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES16.items()}
    twin = rlx_gpu.reference.Muon(params, lr=0.02, ns_dtype="float16")
    gpu = rlx_gpu.Muon(params, lr=0.02, ns_dtype="float16", device=device)
    assert gpu.ns_path == path
    tps = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in params.items()}
    to = torch.optim.Muon(list(tps.values()), lr=0.02)
    for s in range(10):
        g = {k: rng.standard_normal(v).astype(np.float32) for k, v in SHAPES16.items() if (s, k) != (3, "e")}
        for k, t in tps.items():
            t.grad = torch.tensor(g[k]) if k in g else None
        twin.step(g)
        gpu.step(g)
        to.step()
    sd = gpu.state_dict()["state"]
    for k in SHAPES16:
        np.testing.assert_allclose(gpu.params[k].numpy(), twin.params[k], rtol=0, atol=MUON16_TOL[path], err_msg=k)
        np.testing.assert_allclose(gpu.params[k].numpy(), tps[k].detach().numpy(), rtol=0, atol=2e-3, err_msg=k)
        np.testing.assert_allclose(sd[k]["momentum_buffer"], twin.state[k]["momentum_buffer"], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="ns_dtype"):
        rlx_gpu.Muon(params, ns_dtype="bfloat16", device=device)


@pytest.mark.parametrize("path", ["emulated", "subgroup-matrix"])
def test_muon_f16_tensor_core_checked_steps(path, device, monkeypatch):
    """The tensor-core Newton-Schulz inside a checked step: an inf grad skips the step with every buffer
    bit-identical, the next steps follow the twin (its dispatches fit the indirect-argument buffer)."""
    _f16_path(path, device, monkeypatch)
    rng = np.random.default_rng(11)
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES16.items()}
    kw = dict(lr=0.02, ns_dtype="float16", skip_nonfinite=True, clip_grad_norm=10.0)
    gpu, twin = rlx_gpu.Muon(params, **kw, device=device), rlx_gpu.reference.Muon(params, **kw)
    steps_with_a_skip(gpu, twin, lambda: {k: rng.standard_normal(v).astype(np.float32) for k, v in SHAPES16.items()},
                      4, 1, ("g", (3, 5)))
    for k in SHAPES16:
        np.testing.assert_allclose(gpu.params[k].numpy(), twin.params[k], rtol=0, atol=MUON16_TOL[path], err_msg=k)
