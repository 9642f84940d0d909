"""ZeRO-1 over torch.distributed (gloo on localhost, ranks as processes on the CPU adapter): 2 and 3 ranks with
different local grads give, after every step, the params of the single-process optimizer stepping the averaged
grads (the mean is the same float32 sums on every rank: bit for bit with 2 ranks, where the sum of two terms has
one order; with 3, gloo's ring may add in another order: 1e-6 relative), every rank holds the same params, and an
inf on one rank skips the step on all."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx_gpu

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="torch.distributed is the transport")
WORKER = Path(__file__).with_name("zero_worker.py")
SHAPES = {"a": (37, 5), "b": (11,), "c": (4, 4, 3), "d": (1,)}


def run(tmp_path, world, cls_name, steps, opts):
    out = tmp_path / "zero.npz"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", str(WORKER),
           str(out), cls_name, str(steps), repr(opts)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return [dict(np.load(tmp_path / f"zero.rank{k}.npz")) for k in range(world)]


@pytest.mark.parametrize("world,cls_name,opts", [(2, "AdamW", {"skip_nonfinite": True}),
                                                 (3, "SGD", {"momentum": 0.9, "lr": 0.1, "skip_nonfinite": True})])
def test_zero_equals_single_process_on_averaged_grads(tmp_path, world, cls_name, opts):
    steps = 6
    ranks = run(tmp_path, world, cls_name, steps, opts)
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    ref = getattr(rlx_gpu, cls_name)(params, device="cpu", **opts)
    for s in range(steps):
        gs = [{n: np.random.default_rng(100 * s + r).standard_normal(v).astype(np.float32) for n, v in SHAPES.items()}
              for r in range(world)]
        if s == 3:
            gs[-1]["a"][0, 0] = np.inf
        total = {n: gs[0][n].copy() for n in SHAPES}
        for g in gs[1:]:
            for n in SHAPES:
                total[n] = total[n] + g[n]
        ref.step({n: total[n] / np.float32(world) for n in SHAPES})
        assert all(bool(r[f"skipped@{s}"]) == (s == 3) for r in ranks)
        for n in SHAPES:
            want = ref.params[n].numpy()
            for r in ranks:
                if world == 2:
                    assert np.array_equal(r[f"{n}@{s}"], want), (s, n)
                else:
                    np.testing.assert_allclose(r[f"{n}@{s}"], want, rtol=1e-6, atol=1e-7, err_msg=f"{s} {n}")
    full = sum(int(np.prod(v)) for v in SHAPES.values())
    per = [int(r["state_bytes"]) for r in ranks]
    assert max(per) < full * 4 * (2 if cls_name == "AdamW" else 1)  # (each rank: its shard's state only)


def test_refuses_what_it_cannot_shard():
    from rlx_gpu.distributed import ZeroRedundancyOptimizer, shard_ranges
    assert shard_ranges(10, 3) == [(0, 3), (3, 6), (6, 10)]
    with pytest.raises(ValueError, match="LAMB is not supported yet"):
        ZeroRedundancyOptimizer({"w": np.ones(3, np.float32)}, optimizer_class=rlx_gpu.LAMB)
