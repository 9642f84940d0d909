"""The float32 GEMM's staging variants (``linalg.record.PREFETCH``, shaders/gemm.wgsl's PF): the next K slab's
loads held in registers while one is summed (1), and without edge checks in slabs inside both operands (2). Each
stages the same values in the same places as the first version (0), so every output's sums run in the same order:
the results must be the same bits (compared as uint32 words, no tolerance), at edges (M, N, K off the tiles'
multiples, K below one slab), every transpose, batches, split K, and through Muon's step."""
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu import linalg
from rlx_gpu.linalg import record

pytestmark = pytest.mark.gpu

SHAPES = [(130, 77, 260, None), (5, 3, 9, None), (256, 128, 384, 2), (33, 70, 1000, 3), (128, 40, 4, None)]


def _matmul(a, b, ta, tb, device, pf, monkeypatch):
    monkeypatch.setattr(record, "PREFETCH", pf)
    return linalg.matmul(a, b, transpose_a=ta, transpose_b=tb, device=device)


@pytest.mark.parametrize("M,K,N,batch", SHAPES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_staging_variants_give_the_same_bits(M, K, N, batch, ta, tb, device, monkeypatch):
    rng = np.random.default_rng(M * 7 + K)
    sa, sb = ((K, M) if ta else (M, K)), ((N, K) if tb else (K, N))
    if batch:
        sa, sb = (batch, *sa), (batch, *sb)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    first = _matmul(a, b, ta, tb, device, 0, monkeypatch)
    ref = (np.swapaxes(a, -1, -2) if ta else a).astype(np.float64) @ (np.swapaxes(b, -1, -2) if tb else b)
    assert np.abs(first - ref).max() <= 2e-5 * max(1.0, np.abs(ref).max())  # (matmul's float32 tolerance)
    for pf in (1, 2):
        got = _matmul(a, b, ta, tb, device, pf, monkeypatch)
        assert got.shape == first.shape and np.array_equal(got.view(np.uint32), first.view(np.uint32)), pf


def test_split_k_with_each_staging(device, monkeypatch):
    """A split-K GEMM (few tiles, a long K: gemm's workgroups sum chunks of K into slabs) stages its chunks alike."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 3000, 32)).astype(np.float32), rng.standard_normal((3, 3000, 96)).astype(np.float32)
    assert record.split_k(32, 96, 3000, 3)[0] > 1
    outs = [_matmul(a, b, True, False, device, pf, monkeypatch).view(np.uint32) for pf in (0, 1, 2)]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])


def test_muon_float32_step_with_each_staging(device, monkeypatch):
    """Muon's float32 Newton-Schulz (X X^T, B A, B X on 2-D tensors taken wide and tall) over three steps."""
    rng = np.random.default_rng(5)
    params = {"w": rng.standard_normal((96, 200)).astype(np.float32),
              "v": rng.standard_normal((150, 40)).astype(np.float32)}
    grads = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in params.items()} for _ in range(3)]
    out = []
    for pf in (0, 2):
        monkeypatch.setattr(record, "PREFETCH", pf)
        opt = rlx_gpu.Muon(params, lr=0.02, device=device)
        for g in grads:
            opt.step(g)
        out.append({k: opt.params[k].numpy().view(np.uint32) for k in params})
    assert all(np.array_equal(out[0][k], out[1][k]) for k in params)


def test_a_bad_staging_value_is_refused(device, monkeypatch):
    monkeypatch.setattr(record, "PREFETCH", 3)
    a = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="PREFETCH"):
        linalg.matmul(a, a, device=device)
