"""Checked steps (skip_nonfinite, GradScaler) settle their outcomes every few steps or when asked, never per step
(rlx_gpu/engine/gating.py): long skip patterns against a run that settles after every step (bit for bit) and the
twin; reads at arbitrary points; runs that cannot continue (another set of tensors with grads, a tensor's first
grad, another state needed, NAdam's scalar states under a changed hyperparameter, a loaded state dict, a plain
step); a GradScaler. The record tables (rlx_gpu/engine/tables.py) against one-step records, and the quick path
(rlx_gpu/engine/quick.py) against the general one."""
import numpy as np
import pytest

import rlx_gpu
from cases import CASES, case_id
from helpers import assert_same, make_params, snapshot

pytestmark = pytest.mark.gpu
SIZES = [(6, 7), 300, 5, 33]
LONG = [(rlx_gpu.AdamW, rlx_gpu.reference.AdamW, {}), (rlx_gpu.SGD, rlx_gpu.reference.SGD, {"momentum": 0.9}),
        (rlx_gpu.NAdamW, rlx_gpu.reference.NAdamW, {}), (rlx_gpu.Adafactor, rlx_gpu.reference.Adafactor, {}),
        (rlx_gpu.AdamW, rlx_gpu.reference.AdamW, {"clip_grad_norm": 0.5})]


def skip_pattern(steps: int, seed: int) -> np.ndarray:
    """Random skips (a quarter), the first three steps, and a burst longer than a settling period."""
    rng = np.random.default_rng(seed)
    bad = rng.random(steps) < 0.25
    bad[:3] = True
    bad[40:80] = True
    return bad


def grads_at(params, s: int, bad: bool) -> dict:
    rng = np.random.default_rng(1000 + s)
    g = {n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items()}
    if bad:
        name = sorted(g)[s % len(g)]
        g[name].reshape(-1)[s % g[name].size] = (np.inf, np.nan, -np.inf)[s % 3]
    return g


@pytest.mark.parametrize("gpu_cls,twin_cls,opts", LONG, ids=case_id)
def test_long_skip_patterns(gpu_cls, twin_cls, opts, device):
    """150 steps with skips in every pattern: the run that never asks equals the run that reads every outcome at
    once, bit for bit (params, every state buffer, step counts), and the twin."""
    params = make_params(SIZES, seed=5)
    lazy, eager = (gpu_cls(params, skip_nonfinite=True, device=device, **opts) for _ in range(2))
    twin = twin_cls(params, skip_nonfinite=True, **opts)
    bad = skip_pattern(150, 6)
    for s in range(150):
        g = grads_at(params, s, bad[s])
        lazy.step(g)
        eager.step(g)
        twin.step(g)
        assert eager.last_step_skipped == bool(bad[s]) == twin.last_step_skipped, s
        assert lazy._run is not None and lazy._run.u <= 2 * lazy.outcome_every + 1  # (never read, never waited on)
    assert snapshot(lazy) == snapshot(eager)
    assert lazy.last_step_skipped == bool(bad[-1])
    assert_same(lazy, twin, f"{gpu_cls.__name__} {opts}")


def test_reads_at_arbitrary_points(device):
    """state_dict(), last_step_skipped, last_grad_norm() and an Outcome read now and then: each is what the twin
    says then, and the run ends where a run without reads ends, bit for bit."""
    params = make_params(SIZES, seed=7)
    kw = dict(skip_nonfinite=True, clip_grad_norm=1.0)
    read, quiet = (rlx_gpu.AdamW(params, device=device, **kw) for _ in range(2))
    twin = rlx_gpu.reference.AdamW(params, **kw)
    bad = skip_pattern(90, 8)
    rng = np.random.default_rng(9)
    outcomes = []
    for s in range(90):
        g = grads_at(params, s, bad[s])
        outcomes.append(read._step(g, check=True))
        quiet.step(g)
        twin.step(g)
        what = rng.integers(6)
        if what == 0:
            sd, td = read.state_dict()["state"], twin.state_dict()["state"]
            assert {n: st["step"] for n, st in sd.items()} == {n: st["step"] for n, st in td.items()}, s
        elif what == 1:
            assert read.last_step_skipped == twin.last_step_skipped, s
        elif what == 2:
            norm = read.last_grad_norm()
            assert (np.isnan(norm) if bad[s] else abs(norm - twin.last_grad_norm()) <= 1e-5 * norm), s
        elif what == 3:
            k = int(rng.integers(s + 1))
            assert outcomes[k].skipped == bool(bad[k]), (s, k)
    assert [o.skipped for o in outcomes] == [bool(b) for b in bad]
    assert snapshot(read) == snapshot(quiet)
    assert_same(read, twin, "reads at arbitrary points")


def test_runs_that_cannot_continue(device):
    """Steps that change what the host state after a run depends on: the run settles first and a new one starts.
    Against the twin doing the same, and bit for bit against a run that settles after every step."""
    params = make_params(SIZES, seed=11)
    lazy, eager = (rlx_gpu.SGD(params, lr=0.05, skip_nonfinite=True, device=device) for _ in range(2))
    twin = rlx_gpu.reference.SGD(params, lr=0.05, skip_nonfinite=True)
    bad = skip_pattern(80, 12)
    saved = None
    for s in range(80):
        g = grads_at(params, s, bad[s])
        if s < 10:
            g.pop("t3")  # (t3's first grad comes at step 10: fresh state mid-way)
        if 20 <= s < 30 and s % 3 == 0:
            g.pop("t1")  # (another set of tensors with grads)
        for o in (lazy, eager, twin):
            if s == 35:
                o.param_groups[0]["momentum"] = 0.9  # (a momentum buffer needed from now on)
            if 45 <= s < 55:
                o.param_groups[0]["lr"] = 0.05 / (s - 43)  # (a schedule: new records every step)
            if s == 60:
                saved = saved or o.state_dict()
            if s == 70:
                o.load_state_dict(saved)
            if s == 75:
                o.skip_nonfinite = False  # (a plain step)
            if s == 76:
                o.skip_nonfinite = True
            o.step(g if not (s == 75 and bad[s]) else grads_at(params, s, False))
        assert eager.last_step_skipped == twin.last_step_skipped, s
    assert snapshot(lazy) == snapshot(eager)
    assert_same(lazy, twin, "runs that cannot continue")


def test_scalar_states_under_a_changed_hyperparameter(device):
    """NAdamW's mu_product advances per applied step in float32: a run continues while the betas stay, and
    settles before a step with other betas."""
    params = make_params(SIZES, seed=13)
    lazy, eager = (rlx_gpu.NAdamW(params, skip_nonfinite=True, device=device) for _ in range(2))
    twin = rlx_gpu.reference.NAdamW(params, skip_nonfinite=True)
    bad = skip_pattern(60, 14)
    for s in range(60):
        g = grads_at(params, s, bad[s])
        for o in (lazy, eager, twin):
            if s in (20, 21, 45):
                o.param_groups[0]["betas"] = (0.8 + 0.01 * (s % 7), 0.99)
            o.step(g)
        _ = eager.last_step_skipped  # (reading it waits for the step's outcome: the eager run)
    assert snapshot(lazy) == snapshot(eager)
    assert_same(lazy, twin, "NAdamW scalar states")


def test_gradscaler_long_run(device):
    params = make_params(SIZES, seed=15)
    gpu, twin = rlx_gpu.AdamW(params, device=device), rlx_gpu.reference.AdamW(params)
    sg, st = (rlx_gpu.GradScaler(init_scale=256.0, growth_interval=3) for _ in range(2))
    bad = skip_pattern(70, 16)
    for s in range(70):
        sc = np.float32(st.get_scale())
        g = {n: v * sc for n, v in grads_at(params, s, bad[s]).items()}
        sg.step(gpu, g)
        st.step(twin, g)
        sg.update()
        st.update()
    assert sg.get_scale() == st.get_scale()
    assert_same(gpu, twin, "GradScaler long run")


@pytest.mark.parametrize("gpu_cls,twin_cls,opts", CASES, ids=case_id)
def test_table_rows_are_the_one_step_records(gpu_cls, twin_cls, opts, device):
    """A table's rows (one fill over a rows x tensors grid) equal the records of the same steps made one at a
    time, word for word: fresh state in the first row only, step counts saturating, scalar states advancing."""
    params = make_params(SIZES, seed=17)
    opt = gpu_cls(params, device=device, **opts)
    rng = np.random.default_rng(18)
    opt.step({n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items() if n != "t2"})
    active = np.array([n != "t0" for n in opt._names])
    opt._steps[1] = 2 ** 53 - 2  # (saturates within the table)
    key = opt._table_key(active, False)
    tb = opt._new_table(key, active, 5)
    need = opt._need(key, active)
    for a in range(5):
        opt._pending = {k: v.copy() for k, v in tb.scalars[a].items()}
        fresh = [nd - m for nd, m in zip(need, opt._materialized)] if a == 0 else [frozenset()] * len(need)
        want = opt._records(active, tb.steps[a + 1], fresh, tb.mat1)
        assert np.array_equal(tb.words[a], want), a
        assert tb.steps[a + 1][1] == min(2 ** 53 - 2 + a + 1, 2 ** 53)


@pytest.mark.parametrize("kw", [{}, {"clip_grad_norm": 0.7}, {"skip_nonfinite": True},
                                {"skip_nonfinite": True, "clip_grad_norm": 0.7}], ids=str)
def test_quick_path_equals_the_general_path(kw, device):
    """100 steps from the device grad slots (skips planted there, lr changed now and then) take the quick path
    mostly, and end bit for bit where the general path ends."""
    params = make_params(SIZES, seed=19)
    quick, general = (rlx_gpu.AdamW(params, device=device, **kw) for _ in range(2))
    general._quick_ok = False
    taken = []
    real = quick._quick_step
    quick._quick_step = lambda check: taken.append(real(check)) or taken[-1]
    for s in range(100):
        g = grads_at(params, s, kw.get("skip_nonfinite", False) and s % 9 == 4)
        for o in (quick, general):
            o.write_grads(g)
            if s % 30 == 29:
                o.set_lr(1e-3 * (1 + s // 30))
            o.step()
    assert sum(taken) > 75
    assert snapshot(quick) == snapshot(general)


def test_in_place_hyperparameter_changes_are_seen(device):
    """A group value changed in place (a list of betas set between steps, then edited) makes new records and is
    validated; a bad one raises and changes nothing."""
    params = make_params(SIZES, seed=21)
    gpu, twin = rlx_gpu.AdamW(params, device=device), rlx_gpu.reference.AdamW(params)
    for s in range(6):
        if s == 2:
            gpu.param_groups[0]["betas"], twin.param_groups[0]["betas"] = [0.9, 0.999], [0.9, 0.999]
        if s == 4:
            gpu.param_groups[0]["betas"][0] = twin.param_groups[0]["betas"][0] = 0.5
        g = grads_at(params, s, False)
        gpu.step(g)
        twin.step(g)
    assert_same(gpu, twin, "betas changed in place")
    before = snapshot(gpu)
    gpu.param_groups[0]["betas"][1] = 1.5
    with pytest.raises(ValueError, match="beta"):
        gpu.step(grads_at(params, 7, False))
    assert snapshot(gpu) == before


def test_grad_mul(device):
    """step(grad_mul=c) is the step on the grads times float32(c) (bit for bit where the product is exact);
    it refuses what sets the multiplier itself, and bad input changes nothing."""
    params = make_params(SIZES, seed=23)
    a, b = (rlx_gpu.AdamW(params, device=device) for _ in range(2))
    for s in range(4):
        g = grads_at(params, s, False)
        a.step(g, grad_mul=0.25)
        b.step({n: v * np.float32(0.25) for n, v in g.items()})
    assert snapshot(a) == snapshot(b)
    before = snapshot(a)
    with pytest.raises(TypeError, match="grad_mul must be a number"):
        a.step(grads_at(params, 5, False), grad_mul="0.5")
    a.clip_grad_norm = 1.0
    with pytest.raises(ValueError, match="grad_mul does not combine with clip_grad_norm"):
        a.step(grads_at(params, 5, False), grad_mul=0.5)
    assert snapshot(a) == before
