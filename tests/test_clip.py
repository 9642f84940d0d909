"""Global-norm clipping: torch.nn.utils.clip_grad_norm_'s semantics on the GPU (stand-alone and folded into
the step), on the twins and on NumPy dicts."""
import math

import numpy as np
import pytest

import rlx_gpu
from cases import CASES, case_id
from helpers import assert_same, make_grads, make_params, torch_clip

NORMS = [2.0, 1.0, math.inf, 3.0]
SIZES = [(7, 9), 300, 1, 2049]


@pytest.mark.gpu
@pytest.mark.parametrize("norm_type", NORMS)
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_standalone_on_device_matches_torch(norm_type, max_norm, device):
    params = make_params(SIZES, seed=1)
    grads = make_grads(params, np.random.default_rng(2))
    opt = rlx_gpu.SGD(params, device=device)
    for n, g in grads.items():
        opt.grads[n].write(g)
    total = rlx_gpu.clip_grad_norm(opt, max_norm, norm_type)
    want_total, want = torch_clip(grads, max_norm, norm_type)
    # float32 sums in a different order from torch's: a few ULP of the total
    assert total == pytest.approx(want_total, rel=2e-6)
    for n in grads:
        np.testing.assert_allclose(opt.grads[n].numpy(), want[n], rtol=4e-6, atol=1e-8)


@pytest.mark.parametrize("norm_type", NORMS)
def test_host_dict_and_twin_match_torch(norm_type):
    params = make_params(SIZES, seed=3)
    grads = make_grads(params, np.random.default_rng(4))
    want_total, want = torch_clip(grads, 0.7, norm_type)
    mine = {n: g.copy() for n, g in grads.items()}
    assert rlx_gpu.clip_grad_norm(mine, 0.7, norm_type) == pytest.approx(want_total, rel=1e-6)
    twin = rlx_gpu.reference.SGD(params)
    for n, g in grads.items():
        twin.grads[n][...] = g
    rlx_gpu.clip_grad_norm(twin, 0.7, norm_type)
    for n in grads:
        np.testing.assert_allclose(mine[n], want[n], rtol=1e-6)
        np.testing.assert_allclose(twin.grads[n], want[n], rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("gpu_cls,twin_cls,opts", [c for c in CASES if c[2] == {}], ids=case_id)
def test_fused_clip_in_the_step(gpu_cls, twin_cls, opts, device):
    """clip_grad_norm=max_norm: one reduction pass, the kernels scale each grad; grads are not rewritten."""
    params = make_params(SIZES, seed=5)
    gpu = gpu_cls(params, clip_grad_norm=1.0, device=device)
    twin = twin_cls(params, clip_grad_norm=1.0)
    rng = np.random.default_rng(6)
    for s in range(6):
        g = make_grads(params, rng, drop={"t1"} if s == 2 else ())
        gpu.step(g)
        twin.step(g)
        assert gpu.last_grad_norm() == pytest.approx(twin.last_grad_norm(), rel=2e-6)
        np.testing.assert_array_equal(gpu.grads["t0"].numpy(), g["t0"])  # not rewritten
    assert_same(gpu, twin, f"{gpu_cls.__name__} clipped")


def test_twin_fused_clip_matches_torch():
    torch = pytest.importorskip("torch", reason="torch is the oracle here")
    params = make_params([(5, 4), 30], seed=7)
    twin = rlx_gpu.reference.AdamW(params, lr=0.01, clip_grad_norm=0.5)
    tp = [torch.tensor(p, requires_grad=True) for p in params.values()]
    topt = torch.optim.AdamW(tp, lr=0.01, foreach=False)
    rng = np.random.default_rng(8)
    for _ in range(10):
        g = make_grads(params, rng)
        for t, v in zip(tp, g.values()):
            t.grad = torch.tensor(v)
        torch.nn.utils.clip_grad_norm_(tp, 0.5, foreach=False)
        topt.step()
        twin.step(g)
    for t, n in zip(tp, params):
        np.testing.assert_allclose(twin.params[n], t.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_helpers_and_errors():
    g = {"a": np.array([3.0, 4.0], np.float32)}
    assert rlx_gpu.l2_norm(g["a"]) == 5.0
    assert rlx_gpu.global_grad_clip_scale(g, 1.0) == pytest.approx(0.2, rel=1e-6)
    assert rlx_gpu.global_grad_clip_scale(g, 10.0) == 1.0
    with pytest.raises(ValueError, match="max_norm must be a finite number >= 0"):
        rlx_gpu.clip_grad_norm(g, -1.0)
    with pytest.raises(ValueError, match="norm_type must be > 0 or inf"):
        rlx_gpu.clip_grad_norm(g, 1.0, norm_type=0)
    with pytest.raises(ValueError, match="max_norm must be a finite number >= 0"):
        rlx_gpu.reference.AdamW({"w": np.zeros(2, np.float32)}, clip_grad_norm=math.nan)


@pytest.mark.gpu
def test_flat_reduction_over_chunks(device):
    """Arenas chunked at 64 KiB: the flat norm pass (every tensor has a grad) writes one region of slots per
    chunk; the block-table pass (some tensors without a grad) and the inf/NaN check over chunks as well."""
    small = device.with_binding_cap(64 * 1024)
    params = make_params([(300, 100), 5000, (70, 70), 3], seed=9)
    gpu = rlx_gpu.AdamW(params, clip_grad_norm=0.3, skip_nonfinite=True, device=small)
    twin = rlx_gpu.reference.AdamW(params, clip_grad_norm=0.3, skip_nonfinite=True)
    assert gpu.buckets[0].layout.num_chunks >= 3 and len(gpu.buckets[0].layout.pieces[0]) > 1  # t0 is split over chunks
    rng = np.random.default_rng(10)
    for s in range(5):
        g = make_grads(params, rng, drop={"t2"} if s == 1 else ())
        if s == 3:
            g["t0"][299, 99] = np.nan  # the last element of a tensor split over chunks
        gpu.step(g)
        twin.step(g)
        assert gpu.last_step_skipped == twin.last_step_skipped == (s == 3)
        if s != 3:
            assert gpu.last_grad_norm() == pytest.approx(twin.last_grad_norm(), rel=2e-6)
    assert_same(gpu, twin, "chunked clip")
    for norm_type in (2.0, np.inf):  # the stand-alone clip over every chunk (a sum and a max)
        g = make_grads(params, rng)
        for n, v in g.items():
            gpu.grads[n].write(v)
        host = {n: v.copy() for n, v in g.items()}
        want = rlx_gpu.clip_grad_norm(host, 0.5, norm_type=norm_type)
        got = rlx_gpu.clip_grad_norm(gpu, 0.5, norm_type=norm_type)
        assert got == pytest.approx(want, rel=2e-6)
        for n in g:
            np.testing.assert_allclose(gpu.grads[n].numpy(), host[n], rtol=4e-6, atol=1e-9)
