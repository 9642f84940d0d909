"""PyTorch users: rlx_gpu optimizers built from torch tensors as drop-ins for torch.optim (tolerances written at
each assertion: rlx_gpu against torch.optim 1e-5 relative to the tensor's scale over 200 steps; against rlx_gpu's
own NumPy API bit for bit, on any adapter, since both run the same kernels on the same grads)."""
import numpy as np
import pytest

import rlx_gpu

torch = pytest.importorskip("torch", reason="torch is what these tests drive")
pytestmark = pytest.mark.gpu


def model(seed=0, dtype=None):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    return m.to(dtype) if dtype is not None else m


def data(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(128, 6, generator=g), torch.randint(0, 3, (128,), generator=g)


def loss_of(m, x, y):
    return torch.nn.functional.cross_entropy(m(x.to(next(m.parameters()).dtype)).float(), y)


def close(a, b, rel):
    """|a - b| <= rel * max(1, max|b|) elementwise (the tensor's scale)."""
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).abs().max()) <= rel * max(1.0, float(b.abs().max()))


def test_adamw_on_model_parameters_matches_torch_and_the_numpy_api(device):
    m, ref = model(), model()
    x, y = data()
    opt = rlx_gpu.AdamW(m.parameters(), lr=3e-3, weight_decay=0.05, device=device)
    topt = torch.optim.AdamW(ref.parameters(), lr=3e-3, weight_decay=0.05)
    init = {str(i): p.detach().numpy().copy() for i, p in enumerate(m.parameters())}
    npopt = rlx_gpu.AdamW(init, lr=3e-3, weight_decay=0.05, device=device)
    for _ in range(200):
        loss_of(m, x, y).backward()
        grads = {str(i): p.grad.numpy().copy() for i, p in enumerate(m.parameters())}
        assert opt.step() is None
        npopt.step(grads)
        opt.zero_grad()
        assert all(p.grad is None for p in m.parameters())  # torch's default: set_to_none
        loss_of(ref, x, y).backward()
        topt.step()
        topt.zero_grad()
    for i, (p, q) in enumerate(zip(m.parameters(), ref.parameters())):
        assert close(p, q, 1e-5), i  # against torch.optim.AdamW: 1e-5 of the tensor's scale
        np.testing.assert_array_equal(p.detach().numpy(), npopt.params[str(i)].numpy())  # bit for bit
    with torch.no_grad():
        assert loss_of(m, x, y).item() < 0.8 * loss_of(model(), x, y).item()  # and it learned


@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_named_parameters_groups_and_missing_grads(twin, device):
    m, ref = model(), model()
    cls = rlx_gpu.reference.SGD if twin else rlx_gpu.SGD
    kw = {} if twin else {"device": device}
    groups = [{"params": [p for n, p in m.named_parameters() if n.endswith("weight")], "lr": 0.1},
              {"params": [p for n, p in m.named_parameters() if n.endswith("bias")]}]
    opt = cls(groups, lr=0.05, momentum=0.9, **kw)
    assert list(opt.params) == ["0", "1", "2", "3"]  # (torch's indices; the GPU class's groups hold the tensors)
    if twin:
        assert list(opt.param_groups[0]["params"]) == ["0", "1"] and list(opt.param_groups[1]["params"]) == ["2", "3"]
    else:
        assert [p for g in opt.param_groups for p in g["params"]] == [p for g in groups for p in g["params"]]
    named = cls(m.named_parameters(), lr=0.05, **kw)
    assert list(named.params) == [n for n, _ in m.named_parameters()]
    tgroups = [{"params": [p for n, p in ref.named_parameters() if n.endswith("weight")], "lr": 0.1},
               {"params": [p for n, p in ref.named_parameters() if n.endswith("bias")]}]
    topt = torch.optim.SGD(tgroups, lr=0.05, momentum=0.9)
    x, y = data()
    for step in range(30):
        for mod, o in ((m, opt), (ref, topt)):
            loss_of(mod, x, y).backward()
            if step % 4 == 1:
                mod[2].bias.grad = None  # no grad: that tensor and its momentum stay as they are
            o.step()
            o.zero_grad()
    for p, q in zip(m.parameters(), ref.parameters()):
        assert close(p, q, 1e-5)


@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_closure_zero_grad_and_tensors_changed_in_torch(twin, device):
    m = model()
    opt = (rlx_gpu.reference.Adam(m.parameters(), lr=1e-2) if twin
           else rlx_gpu.Adam(m.parameters(), lr=1e-2, device=device))
    x, y = data()

    def closure():
        opt.zero_grad()
        loss = loss_of(m, x, y)
        loss.backward()
        return loss
    first = opt.step(closure)
    assert isinstance(first, torch.Tensor) and opt.step(closure=closure).item() < first.item()
    loss_of(m, x, y).backward()
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in m.parameters())
    # changed in torch since the last step: in place (its version counter), and a new storage (p.data = ...): the
    # next step starts from the new values (plain SGD with grads of 1: p - 0.1)
    sgd = rlx_gpu.reference.SGD(m.parameters(), lr=0.1) if twin else rlx_gpu.SGD(m.parameters(), lr=0.1, device=device)
    with torch.no_grad():
        m[0].weight.mul_(0.0)
    m[2].bias.data = torch.full_like(m[2].bias, 7.0)
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    sgd.step()
    assert torch.equal(m[0].weight, torch.full_like(m[0].weight, np.float32(0) - np.float32(0.1)))
    assert torch.equal(m[2].bias, torch.full_like(m[2].bias, np.float32(7) - np.float32(0.1)))


def test_bfloat16_tensors_step_as_the_numpy_api(device):
    from ml_dtypes import bfloat16
    m = model(dtype=torch.bfloat16)
    init = {str(i): p.detach().float().numpy().astype(bfloat16) for i, p in enumerate(m.parameters())}
    opt = rlx_gpu.AdamW(m.parameters(), lr=1e-2, master_weights=True, device=device)
    npopt = rlx_gpu.AdamW(init, lr=1e-2, master_weights=True, device=device)
    x, y = data()
    for _ in range(20):
        loss_of(m, x, y).backward()
        grads = {str(i): p.grad.float().numpy().astype(bfloat16) for i, p in enumerate(m.parameters())}
        opt.step()
        npopt.step(grads)
        opt.zero_grad()
    for i, p in enumerate(m.parameters()):
        assert p.dtype == torch.bfloat16
        np.testing.assert_array_equal(p.detach().view(torch.int16).numpy(), npopt.params[str(i)].numpy().view(np.int16))


def test_switching_between_torch_and_rlx_gpu_mid_run(device):
    """20 steps of torch.optim.AdamW, then 20 of rlx_gpu.AdamW from its state dict, then back: as 60 of torch."""
    m, ref = model(), model()
    x, y = data()
    topt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    ropt = torch.optim.AdamW(ref.parameters(), lr=3e-3)

    def run(mod, o, n):
        for _ in range(n):
            loss_of(mod, x, y).backward()
            o.step()
            o.zero_grad()
    run(m, topt, 20)
    opt = rlx_gpu.AdamW(m.parameters(), lr=3e-3, device=device)
    opt.load_state_dict(rlx_gpu.from_torch_state_dict(topt.state_dict(), opt))
    run(m, opt, 20)
    topt.load_state_dict(rlx_gpu.to_torch_state_dict(opt.state_dict(), like=topt))
    assert int(topt.state_dict()["state"][0]["step"]) == 40
    run(m, topt, 20)
    run(ref, ropt, 60)
    for p, q in zip(m.parameters(), ref.parameters()):
        assert close(p, q, 1e-5)


def test_torch_scheduler_and_grad_scaler_on_rlx_gpu_torch_adamw(device):
    import rlx_gpu.torch as rt
    m, ref = model(), model()
    x, y = data()
    opt = rt.AdamW(m.parameters(), lr=1e-2, device=device)
    assert isinstance(opt, torch.optim.Optimizer) and isinstance(opt, rlx_gpu.AdamW)
    topt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    runs = [(m, opt), (ref, topt)]
    tools = [(torch.optim.lr_scheduler.OneCycleLR(o, max_lr=2e-2, total_steps=60),
              torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)) for _, o in runs]
    for step in range(60):
        for (mod, o), (sched, scaler) in zip(runs, tools):
            loss = loss_of(mod, x, y)
            scaler.scale(loss * (float("inf") if step == 7 else 1.0)).backward()  # one overflow: skipped by both
            scaler.step(o)
            scaler.update()
            sched.step()
            o.zero_grad()
    assert tools[0][1].get_scale() == tools[1][1].get_scale() < 2.0 ** 10
    assert opt.param_groups[0]["lr"] == topt.param_groups[0]["lr"]
    for p, q in zip(m.parameters(), ref.parameters()):
        assert close(p, q, 1e-5)
    sd = opt.state_dict()  # torch's format: loads into torch.optim.AdamW and back
    assert set(sd["state"]) == {0, 1, 2, 3} and int(sd["state"][0]["step"]) == int(topt.state_dict()["state"][0]["step"])
    torch.optim.AdamW(model().parameters(), lr=1e-2).load_state_dict(sd)
    opt.load_state_dict(topt.state_dict())


def test_bad_torch_params_are_clear_errors(device):
    m = model()
    with pytest.raises(TypeError, match="'0' has dtype torch.float64"):
        rlx_gpu.AdamW([torch.zeros(3, dtype=torch.float64)], device=device)
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors, but one of the params is numpy"):
        rlx_gpu.AdamW({"a": torch.zeros(3), "b": np.zeros(3, np.float32)}, device=device)
    with pytest.raises(TypeError, match="params is a torch.nn.Module \\(Sequential\\); pass model.parameters\\(\\)"):
        rlx_gpu.AdamW(m, device=device)
    opt = rlx_gpu.AdamW(m.parameters(), device=device)
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    m[0].weight.grad = torch.ones(16, 6).to_sparse()
    before = [p.detach().clone() for p in m.parameters()]
    with pytest.raises(RuntimeError, match="AdamW does not support sparse gradients"):  # (torch's type)
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), before))  # checked before any change


def test_single_tensors_and_duplicates(device):
    w = torch.nn.Parameter(torch.ones(3, 2))
    with pytest.raises(TypeError, match="params argument given to the optimizer should be an iterable of Tensors or "
                                        "dicts, but got torch.nn.parameter.Parameter; pass \\[tensor\\]"):
        rlx_gpu.SGD(w, device=device)  # as torch: params must be an iterable
    opt = rlx_gpu.SGD([{"params": w}], lr=0.5, device=device)  # torch takes {"params": tensor} as one param
    assert list(opt.params) == ["0"] and opt.params["0"].shape == (3, 2)
    w.grad = torch.ones_like(w)
    opt.step()
    assert torch.equal(w, torch.full((3, 2), 0.5))
    for cls in (rlx_gpu.SGD, rlx_gpu.reference.SGD):  # torch's rule: a warning within a group (stepped once) ...
        kw = {} if cls is rlx_gpu.reference.SGD else {"device": device}
        with pytest.warns(UserWarning, match="a parameter group with duplicate parameters"):
            twice = cls([w, w], lr=0.5, **kw)
        assert list(twice.params) == ["0"]
        with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
            cls([{"params": [w]}, {"params": [w]}], **kw)  # ... a ValueError across groups


@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_write_params_restore_and_clip_reach_the_tensors(twin, device, tmp_path):
    m, ref = model(), model()
    opt = (rlx_gpu.reference.SGD(m.parameters(), lr=0.1) if twin
           else rlx_gpu.SGD(m.parameters(), lr=0.1, device=device))
    x, y = data()
    loss_of(m, x, y).backward()
    v = m[0].weight._version
    opt.step()
    assert m[0].weight._version > v  # bumped, as torch's in-place update bumps it
    opt.save(tmp_path / "ck.npz")
    saved = [p.detach().clone() for p in m.parameters()]
    opt.write_params({"1": np.full(16, 3.0, np.float32)})
    assert torch.equal(m[0].bias, torch.full((16,), 3.0))
    opt.restore(tmp_path / "ck.npz")
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), saved))
    # clipping clips the tensors' .grad, as torch.nn.utils.clip_grad_norm_ does
    loss_of(m, x, y).backward()
    loss_of(ref, x, y).backward()
    for p, q in zip(ref.parameters(), m.parameters()):
        p.data.copy_(q.data)
        p.grad = q.grad.clone()
    want = torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.05)
    got = rlx_gpu.clip_grad_norm(opt, 0.05)
    assert got == pytest.approx(float(want), rel=1e-5)
    for p, q in zip(m.parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_state_dicts_from_torch_continue_as_torch(momentum, device):
    """torch's SGD keeps no step count: its state loads (step 1 where a buffer exists) and continues as torch."""
    m, ref = model(), model()
    x, y = data()
    topt, ropt = (torch.optim.SGD(mod.parameters(), lr=0.05, momentum=momentum) for mod in (m, ref))
    for mod, o in ((m, topt), (ref, ropt)):
        for _ in range(5):
            loss_of(mod, x, y).backward()
            o.step()
            o.zero_grad()
    opt = rlx_gpu.SGD(m.parameters(), lr=0.05, momentum=momentum, device=device)
    opt.load_state_dict(rlx_gpu.from_torch_state_dict(topt.state_dict(), opt))
    for mod, o in ((m, opt), (ref, ropt)):
        for _ in range(5):
            loss_of(mod, x, y).backward()
            o.step()
            o.zero_grad()
    for p, q in zip(m.parameters(), ref.parameters()):
        assert close(p, q, 1e-5)


def test_nadamw_keeps_decoupled_weight_decay_across_the_conversion(device):
    m = model()
    opt = rlx_gpu.NAdamW(m.parameters(), device=device)
    sd = rlx_gpu.to_torch_state_dict(opt)  # given the optimizer: torch's NAdam keys too
    assert all(g["decoupled_weight_decay"] is True for g in sd["param_groups"])
    coupled = torch.optim.NAdam(model().parameters(), decoupled_weight_decay=False)
    with pytest.raises(ValueError, match="decoupled_weight_decay"):
        rlx_gpu.from_torch_state_dict(coupled.state_dict(), opt)


def test_tensor_hyperparameters(device):
    """A tensor lr (and betas) as torch takes them: in the constructor, in param groups (what a scheduler writes:
    the tensor, updated in place) and in loaded state dicts; the engine sees their float values."""
    from rlx_gpu.core.torchcontract import native_groups
    with pytest.raises(ValueError, match="betas must be either both floats or both Tensors"):
        rlx_gpu.AdamW(model().parameters(), betas=(torch.tensor(0.8), 0.99), device=device)
    lr = torch.tensor(0.01)
    opt = rlx_gpu.AdamW(model().parameters(), lr=lr, betas=(torch.tensor(0.8), torch.tensor(0.99)), device=device)
    assert opt.param_groups[0]["lr"] is lr
    opt.step()
    assert native_groups(opt)[0]["lr"] == float(lr) and native_groups(opt)[0]["betas"] == (np.float32(0.8),
                                                                                               np.float32(0.99))
    lr.fill_(0.5)  # (a torch scheduler fills the tensor)
    opt.step()
    assert native_groups(opt)[0]["lr"] == 0.5
    sd = opt.state_dict()
    assert sd["param_groups"][0]["lr"] is lr
    sd["param_groups"][0]["lr"] = torch.tensor(0.25)
    opt.load_state_dict(sd)
    opt.step()
    assert native_groups(opt)[0]["lr"] == 0.25 and float(opt.param_groups[0]["lr"]) == 0.25
    plain = rlx_gpu.AdamW({"w": np.ones(3, np.float32)}, lr=torch.tensor(0.125), device=device)  # (NumPy-built)
    plain.param_groups[0]["lr"] = torch.tensor(0.5)
    plain.step({"w": np.ones(3, np.float32)})
    assert plain.param_groups[0]["lr"] == 0.5
