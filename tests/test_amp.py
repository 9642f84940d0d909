"""Dynamic loss scaling and skip_nonfinite: planted inf/NaN skip the whole step (checked byte for byte), the scale
backs off and grows as torch.amp.GradScaler's does, and clean steps match the twin."""
import numpy as np
import pytest

import rlx_gpu
from cases import CASES, case_id
from helpers import assert_same, make_grads, make_params, snapshot


@pytest.mark.gpu
@pytest.mark.parametrize("gpu_cls,twin_cls,opts", [c for c in CASES if c[2] == {}], ids=case_id)
def test_scaler_skips_bad_steps_atomically(gpu_cls, twin_cls, opts, device):
    params = make_params([(6, 7), 300, 5], seed=50)
    gpu, twin = gpu_cls(params, device=device), twin_cls(params)
    sg = rlx_gpu.GradScaler(init_scale=1024.0, growth_interval=3)
    st = rlx_gpu.GradScaler(init_scale=1024.0, growth_interval=3)
    rng = np.random.default_rng(51)
    scales = []
    for s in range(10):
        g = {n: v * np.float32(sg.get_scale()) for n, v in make_grads(params, rng).items()}
        bad = s in (2, 6)
        if bad:
            g["t1"][17] = np.inf if s == 2 else np.nan
        before = snapshot(gpu)
        sg.step(gpu, g)
        st.step(twin, g)
        if bad:
            assert gpu.last_step_skipped and snapshot(gpu) == before  # byte for byte, steps included
        else:
            assert not gpu.last_step_skipped
        sg.update()
        st.update()
        scales.append(sg.get_scale())
    assert scales == [1024.0, 1024.0, 512.0, 512.0, 512.0, 1024.0, 512.0, 512.0, 512.0, 1024.0]
    assert st.get_scale() == sg.get_scale()
    assert_same(gpu, twin, f"{gpu_cls.__name__} scaled")


@pytest.mark.gpu
def test_skip_nonfinite_option_and_unscale_with_clip(device):
    params = make_params([(4, 4), 50], seed=52)
    gpu = rlx_gpu.AdamW(params, skip_nonfinite=True, clip_grad_norm=0.5, device=device)
    twin = rlx_gpu.reference.AdamW(params, skip_nonfinite=True, clip_grad_norm=0.5)
    rng = np.random.default_rng(53)
    for s in range(6):
        g = make_grads(params, rng)
        if s == 3:
            g["t0"][1, 2] = -np.inf
        before = snapshot(gpu)
        gpu.step(g)
        twin.step(g)
        assert gpu.last_step_skipped == twin.last_step_skipped == (s == 3)
        if s == 3:
            assert snapshot(gpu) == before
            assert np.isnan(gpu.last_grad_norm()) and np.isnan(twin.last_grad_norm())  # no norm was taken
        else:
            assert gpu.last_grad_norm() == pytest.approx(twin.last_grad_norm(), rel=2e-6)
    assert_same(gpu, twin, "skip_nonfinite + clip")
    # a scaler's unscale composes with the fused clip: the clip sees the unscaled norm
    sg, st = rlx_gpu.GradScaler(init_scale=256.0), rlx_gpu.GradScaler(init_scale=256.0)
    g = {n: v * np.float32(256.0) for n, v in make_grads(params, rng).items()}
    sg.step(gpu, g)
    st.step(twin, g)
    assert gpu.last_grad_norm() == pytest.approx(twin.last_grad_norm(), rel=2e-6)
    assert_same(gpu, twin, "scaled + clipped")


def test_scaler_rule_matches_torch():
    torch = pytest.importorskip("torch", reason="torch is the oracle here")
    ts = torch.amp.GradScaler("cpu", init_scale=8.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=2)
    w = torch.zeros(1, requires_grad=True)
    topt = torch.optim.SGD([w], lr=0.1)
    ours = rlx_gpu.GradScaler(init_scale=8.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=2)
    twin = rlx_gpu.reference.SGD({"w": np.zeros(1, np.float32)}, lr=0.1)
    for bad in [0, 0, 1, 0, 0, 0, 1, 1, 0, 0]:
        val = float("inf") if bad else 1.0
        ts.scale(torch.ones(1))  # torch's scaler needs scale() called before step()
        w.grad = torch.tensor([val * ts.get_scale()])
        ts.step(topt)
        ts.update()
        ours.step(twin, {"w": np.array([val * ours.get_scale()], np.float32)})
        ours.update()
        assert ours.get_scale() == ts.get_scale()
    np.testing.assert_allclose(twin.params["w"], w.detach().numpy(), rtol=1e-6)


def test_scaler_validation_and_state():
    with pytest.raises(ValueError, match="growth factor must be > 1.0"):
        rlx_gpu.GradScaler(growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff factor must be < 1.0"):
        rlx_gpu.GradScaler(backoff_factor=1.5)
    s = rlx_gpu.GradScaler(init_scale=4.0)
    s._growth_tracker = 5
    t = rlx_gpu.GradScaler()
    t.load_state_dict(s.state_dict())
    assert t.get_scale() == 4.0 and t._growth_tracker == 5
    assert rlx_gpu.GradScaler(enabled=False).scale(3.0) == 3.0


@pytest.mark.gpu
@pytest.mark.parametrize("gpu_cls,twin_cls,opts", [c for c in CASES if c[2] == {}], ids=case_id)
def test_scaler_never_waits_for_the_device(gpu_cls, twin_cls, opts, device, monkeypatch):
    """Steps and updates queue without reading anything back: the outcomes stay unknown on the host while the
    device picks each step's records by its count of applied steps (until step 9, where another set of tensors
    has grads and the earlier outcomes are read first), and the scale lives on the device. Bad steps first, in a
    row, after growth, and a stale inf in a tensor without a grad this step (which must not count); then
    everything equals the twin."""
    reads = []
    real_read = device.read
    monkeypatch.setattr(device, "read", lambda *a, **k: reads.append(a) or real_read(*a, **k))
    params = make_params([(6, 7), 300, 5], seed=54)
    gpu, twin = gpu_cls(params, device=device), twin_cls(params)
    sg = rlx_gpu.GradScaler(init_scale=1024.0, growth_interval=2)
    st = rlx_gpu.GradScaler(init_scale=1024.0, growth_interval=2)
    rng = np.random.default_rng(55)
    bad = {0, 3, 4, 8}
    for s in range(11):
        g = {n: v * np.float32(st.get_scale()) for n, v in make_grads(params, rng).items()}  # the twin's scale
        if s in bad:
            g["t1"][s] = np.inf if s % 2 else np.nan
        if s == 9:  # t1's device slot still holds step 8's NaN; t1 has no grad this step
            g.pop("t1")
        sg.step(gpu, g)
        st.step(twin, g)
        assert gpu._run.u == (s + 1 if s < 9 else 1) and not any(o.settled for o in gpu._run.outcomes)
        sg.update()
        st.update()
    assert reads == []  # nothing came back from the device during the loop
    assert sg.get_scale() == st.get_scale() == 512.0
    assert gpu.last_step_skipped is False
    assert [int(gpu.state_dict()["state"][n]["step"]) for n in params] == \
        [int(twin.state_dict()["state"][n]["step"]) for n in params] == [7, 6, 7]
    assert_same(gpu, twin, f"{gpu_cls.__name__} pipelined scaler")


@pytest.mark.gpu
def test_skip_nonfinite_pipelined_outcomes(device):
    params = make_params([(5, 3), 70], seed=56)
    gpu = rlx_gpu.SGD(params, lr=0.1, momentum=0.9, skip_nonfinite=True, device=device)
    twin = rlx_gpu.reference.SGD(params, lr=0.1, momentum=0.9, skip_nonfinite=True)
    rng = np.random.default_rng(57)
    outcomes = []
    for s in range(6):
        g = make_grads(params, rng)
        if s in (0, 1, 4):  # the momentum buffer is seeded by the first step that is applied
            g["t0"][0, s % 3] = np.inf
        outcomes.append(gpu._step(g, check=True))
        twin.step(g)
    assert [o.settled for o in outcomes] == [False] * 6  # (nothing read back yet)
    assert [o.skipped for o in outcomes] == [True, True, False, False, True, False]
    assert all(o.settled for o in outcomes)  # (one read settled them all)
    assert_same(gpu, twin, "skip_nonfinite pipelined")


@pytest.mark.gpu
def test_scaler_shared_by_two_optimizers_and_its_device_scale(device):
    """torch's rule over a cycle with two optimizers: each skips on its own grads, the scale backs off if either
    found inf/NaN. The scale is readable on the device (scale_binding) and update(new_scale) sets it."""
    pa, pb = make_params([(4, 5)], seed=58), {"u": np.linspace(-1, 1, 33, dtype=np.float32)}
    ga, gb = rlx_gpu.AdamW(pa, device=device), rlx_gpu.SGD(pb, lr=0.1, momentum=0.9, device=device)
    ta, tb = rlx_gpu.reference.AdamW(pa), rlx_gpu.reference.SGD(pb, lr=0.1, momentum=0.9)
    sg, st = rlx_gpu.GradScaler(init_scale=64.0, growth_interval=2), rlx_gpu.GradScaler(init_scale=64.0,
                                                                                        growth_interval=2)
    rng = np.random.default_rng(59)
    for s in range(7):
        scale = np.float32(st.get_scale())
        a = {n: v * scale for n, v in make_grads(pa, rng).items()}
        b = {"u": rng.standard_normal(33).astype(np.float32) * scale}
        if s in (2, 5):
            b["u"][3] = np.inf
        for scaler, (oa, ob) in ((sg, (ga, gb)), (st, (ta, tb))):
            scaler.step(oa, a)
            scaler.step(ob, b)
            scaler.update()
        assert ga.last_step_skipped is False and gb.last_step_skipped == tb.last_step_skipped == (s in (2, 5))
    assert sg.get_scale() == st.get_scale() == 64.0  # 64 128 64 64 128 64 64
    assert_same(ga, ta, "AdamW under a shared scaler")
    assert_same(gb, tb, "SGD under a shared scaler")
    res = sg.scale_binding()
    assert res["size"] == 4 and device.read(res["buffer"], 0, 4).view(np.float32)[0] == 64.0
    sg.update(new_scale=1000.0)
    assert device.read(res["buffer"], 0, 4).view(np.float32)[0] == 1000.0 and sg.get_scale() == 1000.0
    assert sg.state_dict()["_growth_tracker"] == st.state_dict()["_growth_tracker"]
    with pytest.raises(ValueError, match="state lives on a GPU"):
        sg.step(ta, a)


@pytest.mark.gpu
def test_scale_binding_feeds_backward_code_on_the_device(device):
    """A user's shader binds the scale (as a backward pass on the device would, to scale its loss gradient) and
    sees, before each step, the scale that step unscales by: torch's rule applied on the device by update()."""
    src = ("@group(0) @binding(0) var<storage, read> s: array<f32>;\n"
           "@group(0) @binding(1) var<storage, read_write> out: array<f32>;\n"
           "@compute @workgroup_size(1) fn main() { out[0] = s[0]; }\n")
    copy = rlx_gpu.Program(device, src, "main", label="test.scale")
    out = device.buffer(16, "test.out")
    params = make_params([(3, 4), 10], seed=60)
    gpu, twin = rlx_gpu.AdamW(params, device=device), rlx_gpu.reference.AdamW(params)
    sg = rlx_gpu.GradScaler(init_scale=8.0, growth_interval=1)
    st = rlx_gpu.GradScaler(init_scale=8.0, growth_interval=1)
    rng = np.random.default_rng(61)
    seen = []
    for s in range(5):
        copy(1, s=sg.scale_binding(), out=out)
        seen.append(float(device.read(out, 0, 4).view(np.float32)[0]))
        g = {n: v * np.float32(st.get_scale()) for n, v in make_grads(params, rng).items()}
        if s == 2:
            g["t0"][1, 1] = np.inf
        sg.step(gpu, g)
        st.step(twin, g)
        sg.update()
        st.update()
    assert seen == [8.0, 16.0, 32.0, 16.0, 32.0]
    assert sg.get_scale() == st.get_scale() == 64.0
    assert_same(gpu, twin, "scaled from the device")
