"""rlx_gpu.engine.StepGroup: several GPU optimizers in one submission with one global clip and one inf/NaN verdict
(what rlx_gpu.Partition is built on; tests/test_partition.py tests it through Partition). Here: the group against
its members stepped alone with the global clip factor from the host (1e-6), members left out, the outcomes, and
bad input changing nothing."""
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu.engine import StepGroup
from helpers import make_params, snapshot

pytestmark = pytest.mark.gpu


def pair(device, **kw):
    pa, pb = make_params([(6, 7), 30], seed=1), make_params([(5, 4)], seed=2, prefix="u")
    return (rlx_gpu.AdamW(pa, device=device, **kw), rlx_gpu.SGD(pb, lr=0.1, momentum=0.9, device=device, **kw),
            rlx_gpu.reference.AdamW(pa), rlx_gpu.reference.SGD(pb, lr=0.1, momentum=0.9))


def grads(opt, s, bad=False):
    rng = np.random.default_rng(10 + s)
    g = {n: rng.standard_normal(t.shape).astype(np.float32) for n, t in opt.params.items()}
    if bad:
        next(iter(g.values())).reshape(-1)[0] = np.nan
    return g


def test_global_clip_and_skip(device):
    a, b, ta, tb = pair(device, clip_grad_norm=0.5, skip_nonfinite=True)
    group = StepGroup([a, b])
    for s in range(6):
        ga, gb = grads(a, s), grads(b, s, bad=s == 3)
        outs = group.step({a: ga, b: gb})
        assert [o.skipped for o in outs] == [s == 3, s == 3]
        if s == 3:
            continue
        total = np.sqrt(sum(np.sum(x.astype(np.float64) ** 2) for x in [*ga.values(), *gb.values()]))
        c = np.float32(min(0.5 / (total + 1e-6), 1.0))
        ta.step({k: v * c for k, v in ga.items()})
        tb.step({k: v * c for k, v in gb.items()})
    for gpu, twin in ((a, ta), (b, tb)):
        got = gpu.read_params()
        for k, want in twin.params.items():
            np.testing.assert_allclose(got[k], want, atol=1e-6, rtol=1e-6, err_msg=k)


def test_members_left_out_and_device_slots(device):
    """A member left out is not stepped; None steps a member from its device grad slots."""
    a, b, ta, _ = pair(device)
    group = StepGroup([a, b])
    before = snapshot(b)
    for s in range(3):
        g = grads(a, s)
        a.write_grads(g)
        assert len(group.step({a: None})) == 1
        ta.step(g)
    assert snapshot(b) == before
    np.testing.assert_allclose(a.params["t0"].numpy(), ta.params["t0"], atol=1e-6, rtol=1e-6)


def test_bad_input_changes_nothing(device):
    a, b, _, _ = pair(device, skip_nonfinite=True)
    c = rlx_gpu.AdamW(make_params([3], seed=3, prefix="v"), device=device)
    with pytest.raises(ValueError, match="1 to 4 optimizers"):
        StepGroup([])
    with pytest.raises(ValueError, match="more than once"):
        StepGroup([a, a])
    with pytest.raises(TypeError, match="expected GPU optimizers"):
        StepGroup([a, rlx_gpu.reference.AdamW(make_params([3]))])
    group = StepGroup([a, b, c])
    before = [snapshot(o) for o in (a, b, c)]
    with pytest.raises(ValueError, match="must share clip_grad_norm and skip_nonfinite"):
        group.step({a: grads(a, 0), c: grads(c, 0)})
    with pytest.raises(ValueError, match="not a member"):
        StepGroup([a]).step({b: grads(b, 0)})
    with pytest.raises(ValueError, match="shape"):
        group.step({a: grads(a, 0), b: {"u0": np.ones((4, 5), np.float32)}})  # (b's grad is wrong: a unchanged)
    assert [snapshot(o) for o in (a, b, c)] == before


@pytest.mark.parametrize("kw", [{}, {"skip_nonfinite": True}], ids=str)
def test_a_failed_submission_changes_nothing(kw, device, monkeypatch):
    """A submission that fails leaves every member's host state as it was: the next steps equal a group's that
    never failed."""
    a, b, _, _ = pair(device, **kw)
    a2, b2, _, _ = pair(device, **kw)
    group, twin = StepGroup([a, b]), StepGroup([a2, b2])
    group.step({a: grads(a, 0), b: grads(b, 0)})
    twin.step({a2: grads(a2, 0), b2: grads(b2, 0)})
    real = type(device).submit
    monkeypatch.setattr(type(device), "submit", lambda self, enc: (_ for _ in ()).throw(RuntimeError("lost")))
    with pytest.raises(RuntimeError, match="lost"):
        group.step({a: grads(a, 1), b: grads(b, 1)})
    monkeypatch.setattr(type(device), "submit", real)
    for s in (1, 2):
        group.step({a: grads(a, s), b: grads(b, s)})
        twin.step({a2: grads(a2, s), b2: grads(b2, s)})
    assert snapshot(a) == snapshot(a2) and snapshot(b) == snapshot(b2)
