"""Top-k compression on the device (rlx_gpu.compression) against its spec (rlx_gpu.reference.topk), bit for bit:
the entries each tensor sends (ties to the lowest index, zeros, NaN/inf ranked first, k = n), their values, the
residual over several steps, tensors split over arena chunks (a 64 KiB binding cap), and the rebuilt mean in an
optimizer's grad slots."""
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu.compression import Rebuild, TopK, TopKCompressor
from rlx_gpu.reference.topk import TopKTwin, average_lists, topk_count, topk_indices

pytestmark = pytest.mark.gpu
SHAPES = {"a": (37, 5), "b": (11,), "c": (40000,), "d": (1,), "e": (300, 70)}


@pytest.fixture(scope="module")
def dev(device):
    return device.with_binding_cap(1 << 16)


def grads(rng):
    g = {n: (np.round(rng.standard_normal(s) * 4) / 4).astype(np.float32) for n, s in SHAPES.items()}  # (ties)
    g["c"][:5000] = 0.0
    g["e"][3, :] = 7.0
    g["c"][20000:20003] = -7.0
    return g


def test_topk_arguments():
    """issue 21 item 15: a NumPy float ratio is a number (np.float32(0.01) was refused), a bool is not (True was
    taken as 1.0), nor is a non-bool error_feedback."""
    assert TopK(np.float32(0.01)).ratio == float(np.float32(0.01)) and TopK(1).ratio == 1.0
    for bad in (True, np.bool_(True), "0.1", None):
        with pytest.raises(TypeError, match="ratio must be a number"):
            TopK(bad)
    for bad in (0.0, np.float64(1.5), float("nan"), -0.1):
        with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\]"):
            TopK(bad)
    with pytest.raises(TypeError, match="error_feedback must be True or False"):
        TopK(0.1, "no")


def test_spec_itself():
    assert topk_count(0.01, 150) == 2 and topk_count(0.01, 10) == 1 and topk_count(1.0, 7) == 7
    x = np.array([1, -3, 3, np.nan, 0, -np.inf, 3], np.float32)
    assert topk_indices(x, 3).tolist() == [1, 3, 5]  # (NaN, inf, then the first of the tied 3s)
    assert topk_indices(x, 4).tolist() == [1, 2, 3, 5]


@pytest.mark.parametrize("ratio,ef", [(0.05, True), (1.0, True), (0.01, False), (0.3, True)])
def test_compressor_equals_spec(dev, ratio, ef):
    rng = np.random.default_rng(0)
    comp, twin = TopKCompressor(dev, SHAPES, TopK(ratio, ef)), TopKTwin(SHAPES, ratio, ef)
    assert comp.grads_arena.layout.num_chunks > 1  # ("c" and "e" span chunks)
    for step in range(4):
        g = grads(rng)
        comp.write(g)
        idx, val = comp.compress()
        want_idx, want_val = twin.compress(g)
        assert np.array_equal(idx, want_idx), step
        assert np.array_equal(val.view(np.uint32), want_val.view(np.uint32)), step
        res = comp.read_residual()
        for n in SHAPES:
            assert not ef or np.array_equal(res[n], twin.residual[n]), (step, n)


def test_nonfinite_is_reported_and_a_skip_changes_nothing(dev):
    comp = TopKCompressor(dev, SHAPES, TopK(0.05))
    g = grads(np.random.default_rng(1))
    comp.write(g)
    assert comp.compress() is not None
    before = comp.read_residual()
    g["e"][299, 69] = np.nan
    comp.write(g)
    seen = []
    assert comp.compress(lambda bad: seen.append(bad) or True) is None
    assert seen == [True]
    after = comp.read_residual()
    assert all(np.array_equal(before[n], after[n]) for n in SHAPES)
    g["e"][299, 69] = 0.0
    comp.write(g)
    assert comp.compress(lambda bad: seen.append(bad) or bad) is not None and seen == [True, False]


def test_rebuild_into_grad_slots(dev):
    """Three ranks' lists added in rank order into an AdamW's grad slots (tensors over chunks) and times 1/3: equal
    to the spec's mean; the returned partial sums of squares add up to its squared norm."""
    rng = np.random.default_rng(2)
    numel = sum(int(np.prod(s)) for s in SHAPES.values())
    opt = rlx_gpu.AdamW({n: np.zeros(s, np.float32) for n, s in SHAPES.items()}, device=dev)
    K = 3000
    lists = []
    for _ in range(3):
        idx = np.sort(rng.choice(numel, K, replace=False)).astype(np.uint32)
        lists.append((idx, rng.standard_normal(K).astype(np.float32)))
    offs = np.concatenate([[0], np.cumsum([int(np.prod(s)) for s in SHAPES.values()])[:-1]])
    rb = Rebuild(opt.device, [(opt.grads[n], int(o)) for n, o in zip(SHAPES, offs)], K, 3)
    packed = np.stack([np.concatenate([i, v.view(np.uint32)]) for i, v in lists])
    partial = rb.run(packed)
    want = average_lists(lists, numel)
    got = np.concatenate([opt.grads[n].numpy().reshape(-1) for n in SHAPES])
    assert np.array_equal(got, want)
    np.testing.assert_allclose(partial.astype(np.float64).sum(), np.sum(want.astype(np.float64) ** 2), rtol=1e-5)
