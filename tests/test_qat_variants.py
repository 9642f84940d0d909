"""The faster variants of the QAT kernels (issue 28's performance targets) give the first versions' bits: the
vectorised standalone fake-quant kernels (``rlx_gpu.addons.qat.kernels.FAST``) against the first entries, per
tensor, per channel (channel runs shorter than, equal to, and across vec4s and the threads' strides) and fp8, over
extreme values and sizes that end inside a block and inside a vec4; the fused export from kept registers
(``Optimizer.QAT_KEEP``) against reading the run back."""
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu import qat
from rlx_gpu.addons.qat import kernels as K

from test_qat_export import BF16, ROWS, check, grads, same, snapshot

pytest.importorskip("torch")

SIZES = [5, 1023, 4096 * 4 + 12, 3 * 16384 + 7]
SHAPES = [(7, 5, 3), (3, 1024), (768, 6), (64, 33, 4), (5, 3000), (12, 2048)]


def extreme(n, rng):
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 60.0])).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-42, -0.0, 0.5, -2.5, 448.0, 500.0], np.float32)
    x[rng.choice(n, min(n, special.size), replace=False)] = special[:min(n, special.size)]
    return x


@pytest.fixture
def both(monkeypatch):
    """Run ``fn`` with the first kernels and with the vectorised ones: their results' bits."""
    def run(fn):
        out = []
        for fast in (False, True):
            monkeypatch.setattr(K, "FAST", fast)
            out.append(np.asarray(fn(), np.float32).view(np.uint32))
        return out
    return run


def test_the_switch_names_real_entries():
    assert K.variant("fq_affine", fast=True) == "fq_affine_v" and K.variant("fq_affine", fast=False) == "fq_affine"
    assert K.variant("fq_affine") == ("fq_affine_v" if K.FAST else "fq_affine")  # (the default: off, PERF_NOTES 57)
    assert K.variant("ste") == "ste"


@pytest.mark.parametrize("n", SIZES)
def test_per_tensor_and_fp8(both, n):
    rng = np.random.default_rng(n)
    x = extreme(n, rng)
    dev = rlx_gpu.get_device()
    old, new = both(lambda: qat.fake_quantize_per_tensor_affine(x, 0.037, 3, -128, 127, device=dev))
    assert (old == new).all()
    for fmt in ("e4m3fn", "e5m2"):
        for sat in (True, False):
            old, new = both(lambda fmt=fmt, sat=sat: qat.fake_quantize_fp8(x, fmt, sat, device=dev))
            assert (old == new).all(), (fmt, sat)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", [0, 1])
def test_per_channel(both, shape, axis):
    rng = np.random.default_rng(len(shape) + axis)
    x = extreme(int(np.prod(shape)), rng).reshape(shape)
    c = shape[axis]
    scale = rng.uniform(0.001, 0.5, c).astype(np.float32)
    zp = rng.integers(-3, 4, c)
    dev = rlx_gpu.get_device()
    old, new = both(lambda: qat.fake_quantize_per_channel_affine(x, scale, zp, axis, -128, 127, device=dev))
    assert (old == new).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,kw", [(np.float32, {}), (BF16, {}), (BF16, {"master_weights": True})],
                         ids=["float32", "bfloat16", "bfloat16-master"])
def test_the_fused_exports_variants_agree(device, dtype, kw):
    """The update pass's export from the weights its threads kept (QAT_KEEP = 1: every run longer than a vec4 a
    thread takes the read-back loop for the rest; 4: the default) against reading the run back (QAT_KEEP = 0), bit
    for bit, over test_qat_export's rows (int8 and int4, per channel and per tensor, float32 and bfloat16 values)."""
    rng = np.random.default_rng(9)
    p = {n: (rng.standard_normal(s) * rng.uniform(0.01, 3)).astype(np.float32).astype(dtype)
         for n, (s, _) in ROWS.items()}
    spec = {n: v for n, (_, v) in ROWS.items()}
    opts = {k: type("AdamW", (rlx_gpu.AdamW,), {"QAT_KEEP": k})(p, lr=1e-2, qat=spec, device=device, **kw)
            for k in (0, 1, 4)}
    for _ in range(3):
        g = grads(rng, p, None, dtype)
        for o in opts.values():
            o.step(g)
        want = snapshot(opts[0])
        for k in (1, 4):
            assert same(snapshot(opts[k]), want), k
        check(opts[4])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["float32", "bfloat16"])
def test_the_second_pass_variants_agree(device, dtype):
    """The second pass's code kernel with the block's scales in workgroup memory (QAT_ENCODE = "cached") against
    two atomic loads per vec4 ("atomic"), every copy through the second pass (QAT_FUSE off), bit for bit; the
    shapes include blocks over more channels than the workgroup keeps (rows of 8 and 32)."""
    rng = np.random.default_rng(11)
    p = {n: (rng.standard_normal(s) * rng.uniform(0.01, 3)).astype(np.float32).astype(dtype)
         for n, (s, _) in ROWS.items()}
    spec = {n: v for n, (_, v) in ROWS.items()}
    opts = {e: type("AdamW", (rlx_gpu.AdamW,), {"QAT_FUSE": False, "QAT_ENCODE": e})(p, lr=1e-2, qat=spec,
                                                                                      device=device)
            for e in ("atomic", "cached")}
    assert same(snapshot(opts["atomic"]), snapshot(opts["cached"]))  # (the refresh at construction)
    for _ in range(3):
        g = grads(rng, p, None, dtype)
        for o in opts.values():
            o.step(g)
        assert same(snapshot(opts["atomic"]), snapshot(opts["cached"]))
        check(opts["cached"])
