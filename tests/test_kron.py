"""Kron (PSGD): the twin against pytorch_optimizer.Kron (4.1.0) with its random calls fed the twin's values (the
probes for ``torch.randn_like``, the balancing draws for ``np.random.random``; update probability 1.0, where its
counter and our draws agree), the GPU class against the twin (every param, momentum buffer and factor, every step,
with update probability 0.5 and balancing), a real task, the step's surroundings, and bad input.

Tolerances (float32; products summed in other orders, the twin's triangular solves in float64, the oracle's in
float32, its einsum contracted in its own order): params and factors 1e-6, twin vs oracle and GPU vs twin over 12
steps (every comparison also holds at 4e-7); momentum buffers 1e-7 against the oracle."""
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu.linalg import factor
from rlx_gpu.reference import Kron as Twin
from rlx_gpu.reference.kron import device_probe, draws
from helpers import partition_with_adamw, resumed, snapshot

pytestmark = pytest.mark.gpu
SHAPES = {"a": (16, 16), "b": (12, 20), "c": (24, 8)}
OPTS = [{"weight_decay": 0.1}, {"weight_decay": 0.05, "weight_decouple": False},
        {"momentum_into_precondition_update": False, "momentum": 0.5}]
IDS = ["decoupled-wd", "l2-wd", "grad-into-update"]


def params(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


# The float16 path (matmul_dtype="float16": the products' inputs in float16 with f32 sums on the tensor-core GEMM
# where the adapter has it, gemm16 elsewhere; the solves in float32). Tolerances: the displacement's relative error
# |dp - dp_ref| / |dp_ref| (Frobenius, per tensor) 3e-3 and factors 5e-4 absolute over 12 steps (measured against
# the oracle: 1.3e-3 and 2.2e-4 with gemm16, 8.5e-4 and 1.4e-4 emulated; against the twin 7.2e-4 and 8.6e-5);
# momentum buffers, which follow the params' error through L2 decay, 2e-5 (measured 3.1e-6).
F16 = (3e-3, 5e-4, 2e-5)


def kron_gpu(p0, device, matmul_dtype, path="auto", **kw):
    if matmul_dtype == "float16" and "shader-f16" not in device.features:
        pytest.skip(f"{device.name} has no shader-f16")
    gpu = rlx_gpu.Kron(p0, device=device, matmul_dtype=matmul_dtype, **kw)
    if path != "auto":
        gpu._mm_path = path
    return gpu


def close_kron(got: dict, st: dict, p0, want_p: dict, want_q, matmul_dtype, tol, what) -> None:
    """Params and factors within ``tol`` (float32), or by F16's errors."""
    for n in p0:
        if matmul_dtype == "float16":
            err = np.linalg.norm(got[n] - want_p[n]) / max(np.linalg.norm(want_p[n] - p0[n]), 1e-30)
            assert err <= F16[0], (what, n, err)
        else:
            np.testing.assert_allclose(got[n], want_p[n], atol=tol, err_msg=f"{what} {n}")
        for i in (0, 1):
            np.testing.assert_allclose(st[n][f"Q_{i}"], want_q(n, i), atol=F16[1] if matmul_dtype == "float16" else tol,
                                       err_msg=f"{what} {n} Q_{i}")


@pytest.mark.parametrize("who", ["twin", "float32", "float16"])
@pytest.mark.parametrize("opts", OPTS, ids=IDS)
def test_twin_equals_pytorch_optimizer(opts, who, monkeypatch, request):
    """The twin and the GPU class (both paths) against the oracle, its random calls fed the same draws."""
    torch = pytest.importorskip("torch", reason="pytorch_optimizer runs on torch")
    pytest.importorskip("pytorch_optimizer", reason="pytorch_optimizer is the oracle (CI installs it)")
    from pytorch_optimizer.optimizer import psgd
    p0 = params(SHAPES)
    kw = dict(lr=1e-2, precond_update_prob=1.0, balance_prob=0.5, seed=3, **opts)
    ours = Twin(p0, **kw) if who == "twin" else kron_gpu(p0, request.getfixturevalue("device"), who, **kw)
    tp = {n: torch.nn.Parameter(torch.tensor(v)) for n, v in p0.items()}
    oracle = psgd.Kron(list(tp.values()), lr=1e-2, pre_conditioner_update_probability=1.0, balance_prob=0.5, **opts)
    probes, balance = [], []
    monkeypatch.setattr(psgd.torch, "randn_like", lambda t, dtype=None: torch.tensor(probes.pop(0)))
    monkeypatch.setattr(psgd.np.random, "random", lambda: balance.pop(0))
    rng = np.random.default_rng(1)
    balanced = 0
    for s in range(12):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        for n, t in tp.items():
            t.grad = torch.tensor(g[n])
        probes[:] = [device_probe(3)(n, v.shape, s + 1) for n, v in p0.items()]
        balance[:] = [draws(3, s + 1)[1]]
        balanced += balance[0] < 0.5
        oracle.step()
        ours.step(g)
        assert not probes and not balance  # (the oracle drew exactly what the twin did)
        st = ours.state if who == "twin" else ours.state_dict()["state"]
        got = ours.params if who == "twin" else ours.read_params()
        close_kron(got, st, p0, {n: t.detach().numpy() for n, t in tp.items()},
                   lambda n, i: oracle.state[tp[n]]["Q"][i].numpy(), "float16" if who == "float16" else "float32",
                   1e-6 if who == "twin" else 2e-6, s)
        for n, t in tp.items():  # (float16 with L2 decay: g + wd p follows p's error)
            np.testing.assert_allclose(st[n]["momentum_buffer"], oracle.state[t]["momentum_buffer"].numpy(),
                                       atol=F16[2] if who == "float16" else 1e-7)
    assert 2 <= balanced <= 10  # (both branches taken)


@pytest.mark.parametrize("path", ["auto", "emulated"])
def test_float16_path_follows_the_twin(device, path):
    p0 = params({**SHAPES, "e": (40, 33), "f": (300, 40)}, 13)
    kw = dict(lr=1e-2, precond_update_prob=0.5, balance_prob=0.3, seed=5, weight_decay=0.1)
    gpu, twin = kron_gpu(p0, device, "float16", path, **kw), Twin(p0, **kw)
    rng = np.random.default_rng(14)
    for s in range(12):
        g = {n: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for n, v in p0.items()}
        gpu.step(g)
        twin.step(g)
        close_kron(gpu.read_params(), gpu.state_dict()["state"], p0, twin.params, lambda n, i: twin.state[n][f"Q_{i}"],
                   "float16", None, s)


@pytest.mark.parametrize("opts", OPTS, ids=IDS)
def test_gpu_equals_twin(device, opts):
    p0 = params({**SHAPES, "d": (16, 16), "e": (40, 33)}, 2)
    kw = dict(lr=1e-2, precond_update_prob=0.5, balance_prob=0.3, seed=5, **opts)
    gpu, twin = rlx_gpu.Kron(p0, device=device, **kw), Twin(p0, **kw)
    rng = np.random.default_rng(3)
    for s in range(12):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        if s == 4:
            del g["d"]  # (a tensor without a grad: untouched, its step count behind)
        gpu.step(g)
        twin.step(g)
        got, st = gpu.read_params(), gpu.state_dict()["state"]
        for n in p0:
            np.testing.assert_allclose(got[n], twin.params[n], atol=1e-6, err_msg=f"{s} {n}")
            for k in ("momentum_buffer", "Q_0", "Q_1"):
                np.testing.assert_allclose(st[n][k], twin.state[n][k], atol=1e-6, err_msg=f"{s} {n} {k}")
            assert st[n]["step"] == twin.state[n]["step"]


@pytest.mark.parametrize("trsm_wide", [0, 128], ids=["trsm0", "trsm128"])
def test_large_sides_and_a_seeded_resume(device, tmp_path, trsm_wide, monkeypatch):
    """Sides past one workgroup's 256 threads (the solves', bounds' and balancing's strided loops) follow the twin;
    a checkpoint keeps the seed (a hyperparameter), so the resumed run draws what the original does. (``trsm_wide``:
    factor.WIDE, the solves' outer blocks of 128; the same tolerances.)"""
    monkeypatch.setattr(factor, "WIDE", trsm_wide)
    p0 = params({"w": (300, 270), "v": (270, 300)}, 11)
    kw = dict(lr=1e-2, precond_update_prob=1.0, balance_prob=0.5, seed=7)
    gpu, twin = rlx_gpu.Kron(p0, device=device, **kw), Twin(p0, **kw)
    rng = np.random.default_rng(12)
    for s in range(3):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        gpu.step(g)
        twin.step(g)
        st = gpu.state_dict()["state"]
        for n in p0:
            np.testing.assert_allclose(gpu.read_params()[n], twin.params[n], atol=1e-6, err_msg=f"{s} {n}")
            for k in ("Q_0", "Q_1"):
                np.testing.assert_allclose(st[n][k], twin.state[n][k], atol=1e-6, err_msg=f"{s} {n} {k}")
    gpu, other = resumed(gpu, tmp_path / "ck", rng, 2, device)
    assert other.param_groups[0]["seed"] == 7
    assert snapshot(gpu) == snapshot(other)


def test_learns_a_least_squares_task(device):
    """min |X W - Y|^2 over W (48 x 24) with badly scaled inputs: the loss falls 100x in 150 steps."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((256, 48)).astype(np.float32)
    x[:, :6] *= 10.0
    y = x @ rng.standard_normal((48, 24)).astype(np.float32)
    opt = rlx_gpu.Kron({"w": np.zeros((48, 24), np.float32)}, lr=0.05, device=device)
    losses = []
    for _ in range(150):
        r = x @ opt.read_params()["w"] - y
        losses.append(float((r ** 2).mean()))
        opt.step({"w": (2 * x.T @ r / r.size).astype(np.float32)})
    assert losses[-1] < losses[0] / 100, (losses[0], losses[-1])


def test_around_the_step(device, tmp_path):
    """An injected probe reaches the twin and the GPU alike; an inf grad leaves everything bit-identical (factors
    too); clip and lr_scale follow the twin; a checkpoint resumes bit for bit (the draws continue); Partition."""
    p0 = params(SHAPES, 5)
    calls = []

    def probe(name, shape, step):
        calls.append((name, shape, step))
        return np.full(shape, 0.5, np.float32) + np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 1e-3

    opts = dict(lr=1e-2, precond_update_prob=0.7, balance_prob=0.5, clip_grad_norm=1.0, skip_nonfinite=True)
    gpu, twin = rlx_gpu.Kron(p0, device=device, probe=probe, **opts), Twin(p0, probe=probe, **opts)
    gpu.set_lr_scale({"b": 0.5})
    twin.set_lr_scale({"b": 0.5})
    rng = np.random.default_rng(6)
    for s in range(6):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        if s == 3:
            g["a"][0, 0] = np.inf
            before = snapshot(gpu)
        gpu.step(g)
        twin.step(g)
        if s == 3:
            assert gpu.last_step_skipped and twin.last_step_skipped and snapshot(gpu) == before
        for n in p0:
            np.testing.assert_allclose(gpu.read_params()[n], twin.params[n], atol=1e-6, err_msg=f"{s} {n}")
    assert calls and calls[0][:2] == ("a", (16, 16)) and {c[2] for c in calls} <= set(range(1, 6))
    gpu, other = resumed(gpu, tmp_path / "ck", rng, 4, device, prepare=lambda o: setattr(o, "probe", probe))
    assert snapshot(gpu) == snapshot(other)

    partition_with_adamw(rlx_gpu.Kron, Twin, p0, device, rng, atol=1e-6)


@pytest.mark.parametrize("checked", ["skip_nonfinite", "gradscaler", "partition"])
def test_a_nonfinite_probe_skips_a_checked_step(device, checked):
    """issue 21 item 5: with skip_nonfinite (or a GradScaler, or in a Partition) and finite grads, a caller's probe
    with a NaN (or inf) element skips the step as such a grad does (before: 52 NaN factor entries, 24 NaN params,
    last_step_skipped False); the GPU class and the twin alike, and the next step with a finite probe matches."""
    p0 = params(SHAPES, 7)

    def poisoned():  # (step 2's and step 4's first probe of 'b' hold a NaN, an inf: the steps s = 1 and 4 below)
        bad = {2: np.nan, 4: np.inf}

        def probe(name, shape, step):
            v = np.full(shape, 0.5, np.float32) + np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 1e-3
            if name == "b" and step in bad:
                v[3, 4] = bad.pop(step)
            return v
        return probe

    opts = dict(lr=1e-2, precond_update_prob=1.0, skip_nonfinite=checked != "gradscaler")
    if checked == "partition":
        gpu = rlx_gpu.Partition(p0, lambda n, s: "k" if n != "c" else "adamw",
                                {"k": (rlx_gpu.Kron, dict(lr=1e-2, precond_update_prob=1.0, probe=poisoned())),
                                 "adamw": (rlx_gpu.AdamW, {})}, skip_nonfinite=True, device=device)
        kron = gpu.parts["k"]
    else:
        gpu = kron = rlx_gpu.Kron(p0, device=device, probe=poisoned(), **opts)
    twin = Twin({n: v for n, v in p0.items() if n != "c" or checked != "partition"}, probe=poisoned(), **opts)
    scaler = rlx_gpu.GradScaler(init_scale=1.0, growth_interval=1000) if checked == "gradscaler" else None
    rng = np.random.default_rng(2)
    for s in range(5):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        before = snapshot(kron)
        if scaler is not None:
            scaler.step(gpu, g)
            twin.step(g, loss_scale=1.0)
        else:
            gpu.step(g)
            twin.step({n: v for n, v in g.items() if n in twin.params})
        skipped = s in (1, 4)
        assert gpu.last_step_skipped == twin.last_step_skipped == skipped, s
        if skipped:
            assert snapshot(kron) == before
        for n in twin.params:
            got = gpu.read_params()[n]
            assert np.isfinite(got).all()
            np.testing.assert_allclose(got, twin.params[n], atol=1e-6, err_msg=f"{s} {n}")


def test_bad_input(device):
    good = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match=r"'v' has shape \(5,\)"):
        rlx_gpu.Kron({"w": good, "v": np.ones(5, np.float32)}, device=device)
    with pytest.raises(ValueError, match=r"'r' has shape \(1, 8\)"):
        rlx_gpu.Kron({"r": np.ones((1, 8), np.float32)}, device=device)
    with pytest.raises(ValueError, match=r"max_size_triangular=3"):
        rlx_gpu.Kron({"w": good}, max_size_triangular=3, device=device)
    with pytest.raises(ValueError, match="precond_update_prob"):
        rlx_gpu.Kron({"w": good}, precond_update_prob=2.0, device=device)
    with pytest.raises(ValueError, match="seed"):
        Twin({"w": good}, seed=-1)
    with pytest.raises(TypeError, match="probe"):
        rlx_gpu.Kron({"w": good}, probe=3, device=device)
    opt = rlx_gpu.Kron({"w": good}, probe=lambda n, s, k: np.ones((4, 5), np.float32), precond_update_prob=1.0,
                       device=device)
    before = snapshot(opt)
    with pytest.raises(ValueError, match=r"probe for 'w' at step 1"):
        opt.step({"w": good})
    assert snapshot(opt) == before
