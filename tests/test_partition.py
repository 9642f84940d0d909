"""rlx_gpu.Partition: Muon on the hidden matrices and AdamW on the rest, as one optimizer. Against the parts run
separately (the NumPy twins, with the global clip's factor computed on the host): params every step within 1e-6
(the global norm is summed per part on the device, then combined); an inf in one part skips every part (params and
state bit-identical); a GradScaler; one submission per step; state dicts and checkpoints; bad input."""
import copy

import numpy as np
import pytest

import rlx_gpu

pytestmark = pytest.mark.gpu
SHAPES = {"h.0": (32, 16), "h.1": (16, 32), "h.2": (32, 16), "emb": (50, 16), "b": (16,)}
PARTS = {"muon": (rlx_gpu.Muon, {"lr": 0.02}), "adamw": (rlx_gpu.AdamW, {"lr": 1e-2, "weight_decay": 0.01})}


def label(name, shape):
    return "muon" if name.startswith("h.") else "adamw"


def params(seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}


def grads(s):
    rng = np.random.default_rng(100 + s)
    g = {n: rng.standard_normal(v).astype(np.float32) for n, v in SHAPES.items()}
    if s == 3:
        g["emb"][0, 0] = np.inf
    return g


def twins(p):
    mu = rlx_gpu.reference.Muon({k: v for k, v in p.items() if label(k, v.shape) == "muon"}, lr=0.02)
    ad = rlx_gpu.reference.AdamW({k: v for k, v in p.items() if label(k, v.shape) == "adamw"}, lr=1e-2,
                                 weight_decay=0.01)
    return mu, ad


@pytest.mark.parametrize("clip", [None, 0.5])
def test_equals_the_parts_run_separately(device, clip):
    p = params()
    part = rlx_gpu.Partition(p, label, PARTS, device=device, clip_grad_norm=clip, skip_nonfinite=True)
    mu, ad = twins(p)
    for s in range(8):
        g = grads(s)
        part.step(g)
        if s == 3:  # (the inf in AdamW's part: both parts skip)
            assert part.last_step_skipped and all(q.last_step_skipped for q in part.parts.values())
            continue
        c = 1.0
        if clip is not None:
            total = np.sqrt(sum(np.sum(x.astype(np.float64) ** 2) for x in g.values()))
            c = np.float32(min(clip / (total + 1e-6), 1.0))
            assert abs(part.last_grad_norm() - total) <= 1e-5 * total
        mu.step({k: g[k] * np.float32(c) for k in mu.params})
        ad.step({k: g[k] * np.float32(c) for k in ad.params})
        got = part.read_params()
        for k in SHAPES:
            want = mu.params[k] if k in mu.params else ad.params[k]
            np.testing.assert_allclose(got[k], want, atol=1e-6, rtol=1e-6, err_msg=f"{s} {k}")


def test_a_skip_leaves_every_part_unchanged(device):
    part = rlx_gpu.Partition(params(), label, PARTS, device=device, skip_nonfinite=True)
    for s in range(3):
        part.step(grads(s))
    before = (part.read_params(), part.state_dict())
    part.step(grads(3))
    after = (part.read_params(), part.state_dict())
    assert part.last_step_skipped
    for k in SHAPES:
        assert np.array_equal(before[0][k], after[0][k])
    for lab in part.parts:
        for n, st in before[1]["parts"][lab]["state"].items():
            for key, v in st.items():
                assert np.array_equal(np.asarray(v), np.asarray(after[1]["parts"][lab]["state"][n][key])), (n, key)


def test_gradscaler(device):
    """Grads carrying a power-of-two scale, through rlx_gpu.GradScaler: the params of the unscaled run bit for bit
    (the inf step skipped in both parts, the scale backed off once)."""
    plain = rlx_gpu.Partition(params(), label, PARTS, device=device, skip_nonfinite=True)
    scaled = rlx_gpu.Partition(params(), label, PARTS, device=device)
    scaler = rlx_gpu.GradScaler(init_scale=1024.0, growth_interval=1000)
    for s in range(6):
        g = grads(s)
        plain.step(g)
        sc = np.float32(scaler.get_scale())
        scaler.step(scaled, {k: v * sc for k, v in g.items()})
        scaler.update()
    assert scaler.get_scale() == 512.0
    a, b = plain.read_params(), scaled.read_params()
    for k in SHAPES:
        assert np.array_equal(a[k], b[k]), k


def test_one_submission_per_step(device):
    part = rlx_gpu.Partition(params(), label, PARTS, device=device, clip_grad_norm=1.0, skip_nonfinite=True)
    for n, g in grads(0).items():
        part.grads[n].write(g)
    calls = []
    real = part.device.submit
    part.device.submit = lambda enc: (calls.append(1), real(enc))[1]
    try:
        part.step()
    finally:
        del part.device.submit
    assert len(calls) == 1


def test_state_schedules_and_checkpoints(device, tmp_path):
    part = rlx_gpu.Partition(params(), label, PARTS, device=device)
    for s in range(2):
        part.step(grads(s))
    assert [g["lr"] for g in part.param_groups] == [0.02, 1e-2]
    part.param_groups[1]["lr"] = 5e-3  # (a schedule writes the groups: AdamW's part)
    assert part.parts["adamw"].param_groups[0]["lr"] == 5e-3
    part.save(tmp_path / "ck")
    other = rlx_gpu.Partition(params(1), label, PARTS, device=device)
    other.restore(tmp_path / "ck")
    other.param_groups[1]["lr"] = 5e-3
    twin_sd = part.state_dict()
    for q in (part, other):
        q.step(grads(4))
    a, b = part.read_params(), other.read_params()
    for k in SHAPES:
        assert np.array_equal(a[k], b[k]), k
    third = rlx_gpu.Partition(params(1), label, PARTS, device=device)
    third.load_state_dict(twin_sd)
    with pytest.raises(ValueError, match="expected"):
        third.load_state_dict({"parts": {"muon": twin_sd["parts"]["muon"]}})


def test_bad_input(device):
    with pytest.raises(ValueError, match="label gave 'sgd' for 'b'"):
        rlx_gpu.Partition(params(), lambda n, s: "sgd" if n == "b" else label(n, s), PARTS, device=device)
    with pytest.raises(ValueError, match="sets \\['clip_grad_norm'\\]; give them to Partition"):
        rlx_gpu.Partition(params(), label, {"muon": (rlx_gpu.Muon, {"clip_grad_norm": 1.0}),
                                            "adamw": (rlx_gpu.AdamW, {})}, device=device)
    with pytest.raises(ValueError, match="1 to 4 sub-optimizers"):
        rlx_gpu.Partition(params(), label, {str(i): (rlx_gpu.SGD, {}) for i in range(5)}, device=device)
    with pytest.raises(TypeError, match="'b' must be a NumPy array"):
        rlx_gpu.Partition({**params(), "b": [1.0, 2.0]}, label, PARTS, device=device)
    # issue 21 item 15: a part name that cannot name its file (save wrote part of the checkpoint, then failed)
    for bad in ({"mu/on": PARTS["muon"], "adamw": PARTS["adamw"]}, {"": PARTS["muon"], "adamw": PARTS["adamw"]},
                {"muon": PARTS["muon"], "ad\0amw": PARTS["adamw"]}):
        with pytest.raises(ValueError, match="cannot name its checkpoint file"):
            rlx_gpu.Partition(params(), lambda n, s, b=bad: list(b)[label(n, s) == "adamw"], bad, device=device)
    with pytest.raises(ValueError, match="would share"):
        rlx_gpu.Partition(params(), lambda n, s: 1 if label(n, s) == "muon" else "1",
                          {1: PARTS["muon"], "1": PARTS["adamw"]}, device=device)
    part = rlx_gpu.Partition(params(), label, PARTS, device=device)
    before = part.read_params()
    with pytest.raises(KeyError, match="unknown tensor"):
        part.step({"nope": np.zeros(3, np.float32)})
    with pytest.raises(ValueError):
        part.step({"emb": np.zeros((3, 3), np.float32), "h.0": np.zeros((32, 16), np.float32)})
    after = part.read_params()
    assert all(np.array_equal(before[k], after[k]) for k in SHAPES)



@pytest.mark.parametrize("twin", [False, True])
def test_set_lr_scale_checks_every_part_first(twin, device):
    """A bad factor for a tensor of the second part (AdamW's) raises before the first part (Muon's) changes; a
    callable is given to every part, as the single optimizers take it; anything else is a TypeError."""
    part = rlx_gpu.reference.Partition(params(), label, PARTS) if twin else \
        rlx_gpu.Partition(params(), label, PARTS, device=device)
    before = dict(part.lr_scale)
    for bad in ({"h.0": 2.0, "emb": -1.0}, {"h.0": 2.0, "b": float("nan")}, lambda n: -1.0 if n == "b" else 2.0):
        with pytest.raises(ValueError, match="lr_scale for 'emb'|lr_scale for 'b'"):
            part.set_lr_scale(bad)
        assert part.lr_scale == before and all(q.lr_scale == {n: before[n] for n in q.lr_scale}
                                               for q in part.parts.values())
    with pytest.raises(TypeError, match="Partition: lr_scale must be a dict name -> factor or a callable"):
        part.set_lr_scale([("h.0", 2.0)])
    part.set_lr_scale(lambda n: 0.5 if n.startswith("h.") else 3.0)
    assert part.lr_scale == {n: 0.5 if n.startswith("h.") else 3.0 for n in SHAPES}
    part.set_lr_scale({"emb": 2.0})
    assert part.lr_scale == {n: 2.0 if n == "emb" else 1.0 for n in SHAPES}


@pytest.mark.parametrize("twin", [False, True])
def test_set_lr_scale_calls_a_callable_once_per_tensor(twin, device):
    """A callable lr_scale is called once per tensor (as the single optimizers call it), so one that answers
    differently the second time cannot leave the first part changed and the second not; None resets every factor
    to 1, as the single optimizers take it."""
    part = rlx_gpu.reference.Partition(params(), label, PARTS) if twin else \
        rlx_gpu.Partition(params(), label, PARTS, device=device)
    calls = {}

    def f(n):
        calls[n] = calls.get(n, 0) + 1
        return float("nan") if calls[n] > 1 else 2.0
    part.set_lr_scale(f)
    assert calls == dict.fromkeys(SHAPES, 1) and part.lr_scale == dict.fromkeys(SHAPES, 2.0)
    part.set_lr_scale(None)
    assert part.lr_scale == dict.fromkeys(SHAPES, 1.0)


def test_mars_vectors_through_partition(device):
    """MARS's `*_1d` hyperparameters are deprecated (a DeprecationWarning; they still work): Partition routes the
    vectors to AdamW instead, and the two agree within 1e-6 over 10 steps (AdamW's moment is a lerp, MARS's 1-D
    branch b1 m + (1 - b1) g: a rounding apart)."""
    shapes = {"w": (24, 16), "v": (16,), "u": (24,)}
    rng = np.random.default_rng(9)
    p = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    with pytest.warns(DeprecationWarning, match="lr_1d, weight_decay_1d are deprecated"):
        old = rlx_gpu.Mars(p, lr=1e-2, lr_1d=5e-3, weight_decay_1d=0.05, device=device)
    with pytest.warns(DeprecationWarning):
        rlx_gpu.reference.Mars(p, lr_1d=5e-3)
    new = rlx_gpu.Partition(p, lambda n, s: "mat" if len(s) == 2 else "vec",
                            {"mat": (rlx_gpu.Mars, {"lr": 1e-2}),
                             "vec": (rlx_gpu.AdamW, {"lr": 5e-3, "betas": (0.9, 0.95), "weight_decay": 0.05})},
                            device=device)
    for s in range(10):
        g = {n: rng.standard_normal(v).astype(np.float32) for n, v in shapes.items()}
        old.step(g)
        new.step(g)
        a, b = old.read_params(), new.read_params()
        for n in shapes:
            np.testing.assert_allclose(a[n], b[n], atol=1e-6, rtol=1e-6, err_msg=f"{s} {n}")


@pytest.mark.parametrize("clip,skip", [(None, False), (0.5, True)])
def test_twin_equals_the_gpu_partition(device, clip, skip):
    """rlx_gpu.reference.Partition is the GPU class's spec: params and every state buffer within 1e-6 over 8 steps
    (an inf step skipped by both), the global norm within 1e-5."""
    gpu = rlx_gpu.Partition(params(), label, PARTS, device=device, clip_grad_norm=clip, skip_nonfinite=skip)
    twin = rlx_gpu.reference.Partition(params(), label, PARTS, clip_grad_norm=clip, skip_nonfinite=skip)
    for s in range(8):
        if s == 3 and not skip:
            continue
        gpu.step(grads(s))
        twin.step(grads(s))
        assert gpu.last_step_skipped == twin.last_step_skipped == (s == 3)
        if clip is not None and s != 3:
            assert abs(gpu.last_grad_norm() - twin.last_grad_norm()) <= 1e-5 * twin.last_grad_norm()
        a, b = gpu.read_params(), twin.read_params()
        for k in SHAPES:
            np.testing.assert_allclose(a[k], b[k], atol=1e-6, rtol=1e-6, err_msg=f"{s} {k}")
    gs, ts = gpu.state_dict()["parts"], twin.state_dict()["parts"]
    for part in gs:
        for n, st in ts[part]["state"].items():
            for k, v in st.items():
                np.testing.assert_allclose(np.asarray(gs[part]["state"][n][k]), np.asarray(v), atol=1e-6, rtol=1e-6)
    other = rlx_gpu.Partition(params(1), label, PARTS, device=device)
    other.load_state_dict(twin.state_dict())  # (state dicts move between the twin and the GPU class)


@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_load_and_restore_change_every_part_or_none(twin, device, tmp_path):
    """Issue 21 item 7: a bad adamw part used to raise after the muon part was loaded (muon back at step 1,
    adamw at step 2); now every part (every file) is checked before any changes."""
    make = (lambda p: rlx_gpu.reference.Partition(p, label, PARTS)) if twin else \
        (lambda p: rlx_gpu.Partition(p, label, PARTS, device=device))
    part = make(params())
    part.step(grads(0))
    first = part.state_dict()
    part.save(tmp_path / "ck")
    part.step(grads(1))
    before = (part.read_params(), part.state_dict())
    bad = copy.deepcopy(first)
    bad["parts"]["adamw"]["state"]["emb"]["exp_avg"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="exp_avg of 'emb' has shape"):
        part.load_state_dict(bad)
    np.save(tmp_path / "junk.npy", np.zeros(3))
    (tmp_path / "ck.adamw.npz").write_bytes((tmp_path / "junk.npy").read_bytes())
    with pytest.raises(ValueError, match="ck.adamw.npz"):
        part.restore(tmp_path / "ck")
    after = (part.read_params(), part.state_dict())
    for k in SHAPES:
        assert np.array_equal(before[0][k], after[0][k]), k
    for lab in part.parts:
        for n, st in before[1]["parts"][lab]["state"].items():
            assert st["step"] == after[1]["parts"][lab]["state"][n]["step"] == 2, (lab, n)


def test_takes_torch_params_and_is_a_torch_optimizer(device):
    """model.named_parameters() (or parameters(), or groups of tensors) as every optimizer takes them; the result
    is a torch.optim.Optimizer (rlx_gpu.torch.Partition) whose steps take the tensors' .grad, equal to the same
    Partition over NumPy copies; torch's scheduler, torch-format state dicts, and its twin from the same tensors."""
    torch = pytest.importorskip("torch", reason="torch tensors are what this test passes")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    lab = lambda n, s: "muon" if len(s) == 2 else "adamw"  # noqa: E731
    part = rlx_gpu.Partition(m.named_parameters(), lab, PARTS, device=device)
    assert isinstance(part, torch.optim.Optimizer) and type(part) is rlx_gpu.torch.Partition
    assert [len(g["params"]) for g in part.param_groups] == [2, 2]
    plain = rlx_gpu.Partition({n: p.detach().numpy().copy() for n, p in m.named_parameters()}, lab, PARTS,
                              device=device)
    twin = rlx_gpu.reference.Partition(copy.deepcopy(m).named_parameters(), lab, PARTS)
    sched = torch.optim.lr_scheduler.StepLR(part, 2, gamma=0.5)
    x = torch.randn(32, 8)
    for _ in range(4):
        part.zero_grad()
        m(x).pow(2).mean().backward()
        g = {n: p.grad.numpy().copy() for n, p in m.named_parameters()}
        part.step()
        plain.step(g)
        twin.step(g)
        sched.step()
        for gp, gq, gt in zip(plain.param_groups, part.param_groups, twin.param_groups):
            gp["lr"] = gt["lr"] = float(gq["lr"])
    want = plain.read_params()
    for n, p in m.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), want[n])
        np.testing.assert_allclose(twin.read_params()[n], want[n], atol=1e-6)
    sd = part.state_dict()
    assert set(sd["state"]) == {0, 1, 2, 3} and isinstance(sd["state"][0]["momentum_buffer"], torch.Tensor)
    part.load_state_dict(sd)
    part.load_state_dict(plain.state_dict())  # (rlx_gpu's {"parts": ...} too)


@pytest.mark.parametrize("kind", ["gpu", "twin", "torch"])
def test_add_param_group(kind, device):
    """A group added mid-run is routed by label; the parts' states carry over: the run equals one made with every
    group from the start whose new tensors had no grads until then (1e-6)."""
    p = params()
    first = {k: v for k, v in p.items() if k != "h.2"}
    if kind == "torch":
        torch = pytest.importorskip("torch", reason="torch tensors are what this case passes")
        ts = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in p.items()}
        part = rlx_gpu.Partition({k: ts[k] for k in first}, label, PARTS, device=device)
    else:
        part = (rlx_gpu.reference.Partition(first, label, PARTS) if kind == "twin" else
                rlx_gpu.Partition(first, label, PARTS, device=device))
    whole = rlx_gpu.Partition([{"params": first}, {"params": {"h.2": p["h.2"]}, "lr": 0.05}], label, PARTS,
                              device=device)
    for s in range(4):
        if s == 2:
            new = {"h.2": ts["h.2"]} if kind == "torch" else {"h.2": p["h.2"]}
            part.add_param_group({"params": new, "lr": 0.05})
        g = {k: v for k, v in grads(s + 4).items() if s >= 2 or k != "h.2"}
        if kind == "torch":
            for k, t in ts.items():
                t.grad = torch.tensor(g[k]) if k in g else None
            part.step()
        else:
            part.step(g)
        whole.step(g)
    a, b = part.read_params(), whole.read_params()
    for k in SHAPES:
        np.testing.assert_allclose(a[k], b[k], atol=1e-6, rtol=1e-6, err_msg=k)
    assert len(part.param_groups) == 3 and part.parts["muon"].param_groups[-1]["lr"] == 0.05
