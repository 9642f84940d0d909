"""torch's own optimizer tests, run on rlx_gpu's (state dicts, hooks, copies): ports of torch 2.13's
test/test_optim.py TestOptimRenewed over tests/torch_db.py, as tests/test_torch_optim.py (its docstring says what
is ported and how)."""
import copy

import pytest

from torch_db import IDS, INFOS, assert_equal, closure_of, entry, inputs, lockstep, small_model, sparsify, torch

pytestmark = pytest.mark.gpu
Parameter = torch.nn.Parameter


def _conv_model(info):
    torch.manual_seed(1)
    if info.matrix_only:
        return small_model(info, torch.float32), torch.rand(3, 2)
    m = torch.nn.Sequential(torch.nn.Conv2d(4, 2, 1, stride=2), torch.nn.BatchNorm2d(2, eps=1e-05, momentum=0.1))
    return m, torch.rand(1, 4, 16, 16)


def _fwd_bwd(opt, model, x, info):
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    sparsify(info, *model.parameters())
    return loss


def _wb2(info):
    """torch's (2, 3) weight and (2,) bias for the state-dict tests (matrix-only: (3, 2) and (3, 2))."""
    g = torch.Generator().manual_seed(5)
    w = torch.randn((3, 2) if info.matrix_only else (2, 3), generator=g)
    b = torch.randn((3, 2) if info.matrix_only else (2,), generator=g)
    if info.name == "StiefelSGD":
        w, b = torch.linalg.qr(w)[0], torch.linalg.qr(b)[0]
    x = torch.randn(2 if info.matrix_only else 3, generator=g)
    return Parameter(w), Parameter(b), x


def _named(params, named):
    return [(f"name{i}", p) for i, p in enumerate(params)] if named else params


def _strip_names(sd):
    sd = copy.deepcopy(sd)
    for g in sd["param_groups"]:
        g.pop("param_names", None)
    return sd


@pytest.mark.parametrize("named0,named1", [(True, False), (False, True)])
@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_state_dict_deterministic(info, named0, named1, device):
    """A state dict loaded into a second optimizer over clones: the two run identically for 10 steps and their
    state dicts are equal (param names aside); repeated groups pack as torch packs them."""
    if info.name == "Kron" and named0 != named1:
        pytest.skip("Kron's probes are keyed by tensor names (docs/guides/pytorch.md): named and unnamed runs "
                    "draw differently")
    for kw in inputs(info, cliquey=True)[:3]:
        w, b, x = _wb2(info)
        opt = info.optim_cls(_named([w, b], named0), **kw, device=device)
        for _ in range(10):
            closure_of(opt, info, w, b, x)()
            opt.step()
        with torch.no_grad():
            wc, bc = Parameter(w.clone()), Parameter(b.clone())
        optc = entry(info, plain=True)(_named([wc, bc], named1), **kw, device=device)
        optc.load_state_dict(copy.deepcopy(opt.state_dict()))
        lockstep(info, x, 10, (opt, w, b), (optc, wc, bc))
        assert_equal(_strip_names(opt.state_dict()), _strip_names(optc.state_dict()))
        optc.param_groups.extend(optc.param_groups)
        assert _strip_names(opt.state_dict())["param_groups"][-1] == _strip_names(optc.state_dict())["param_groups"][-1]


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_can_load_older_state_dict_and_named(info, device):
    """torch's test_can_load_older_state_dict (the newer flags deleted) and test_can_load_from_to_named_state_dict
    (param_names kept where either side has them)."""
    for kw in inputs(info, cliquey=True)[:2]:
        for named0, named1 in ((False, False), (True, False), (False, True)):
            model, x = _conv_model(info)
            opt = info.optim_cls(model.named_parameters() if named0 else model.parameters(), **kw, device=device)
            for _ in range(3):
                _fwd_bwd(opt, model, x, info)
                opt.step()
            old = copy.deepcopy(opt.state_dict())
            for g in old["param_groups"]:
                for flag in info.not_og_supported_flags:
                    g.pop(flag, None)
            opt.load_state_dict(old)
            _fwd_bwd(opt, model, x, info)
            opt.step()
            second = entry(info, plain=True)(model.named_parameters() if named1 else model.parameters(), **kw,
                                             device=device)
            second.load_state_dict(copy.deepcopy(opt.state_dict()))
            _fwd_bwd(second, model, x, info)
            second.step()
            if named0 or named1:
                assert second.state_dict()["param_groups"][0]["param_names"] == [n for n, _ in model.named_parameters()]


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_save_load_equality_with_weights_only_and_nontensor_step(info, device, tmp_path):
    """torch.save then torch.load, with torch's default weights_only=True, gives the state dict back exactly; a
    state dict whose steps are Python numbers loads."""
    for kw in inputs(info, cliquey=True)[:3]:
        for named in (False, True):
            w, b, x = _wb2(info)
            opt = entry(info, plain=named)(_named([w, b], named), **kw, device=device)
            for _ in range(3):
                opt.step(closure_of(opt, info, w, b, x))
            sd = opt.state_dict()
            path = tmp_path / "sd.pt"
            torch.save(sd, path)
            assert_equal(torch.load(path), sd, exact=True)
            assert_equal(torch.load(path, weights_only=True), sd, exact=True)
            plain = copy.deepcopy(sd)
            for st in plain["state"].values():
                st["step"] = st["step"].item()
            opt.load_state_dict(plain)
            opt.step(closure_of(opt, info, w, b, x))


def _pre_hook(opt):
    opt.state["test"] = 1


def _post_hook(opt, sd):
    sd["ran_state_dict_pre_hook"] = "test" in sd["state"]
    sd["state"].pop("test", None)
    return sd


def _load_pre1(opt, sd):
    sd["param_groups"][0]["lr"] = 0.002


def _load_pre2(opt, sd):
    mine = copy.deepcopy(sd)
    mine["param_groups"][0]["lr"] = 0.003
    return mine


def _load_post(opt):
    opt.state["ran_load_state_dict_pre_hook2"] = opt.param_groups[0]["lr"] == 0.003
    opt.state["ran_load_state_dict_post_hook"] = True


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_state_dict_and_load_hooks(info, device):
    """torch's test_state_dict_{pre,post,pre_post}_hook and test_load_state_dict_{pre_hook_and_prepend,post_hook,
    pre_post_hook}."""
    shape = (3, 2)
    for kw in inputs(info, cliquey=True)[:3]:
        kw.setdefault("lr", 1e-3)  # (the hooks tell 0.003 apart: an lr other than that)

        def make(kw=kw):
            p = torch.rand(*shape, requires_grad=True)
            if info.name == "StiefelSGD":
                p = torch.linalg.qr(torch.randn(*shape))[0].requires_grad_()
            return entry(info, plain=True)([p], **kw, device=device)
        o = make()
        o.register_state_dict_pre_hook(_pre_hook)
        assert o.state_dict()["state"]["test"] == 1
        o = make()
        o.register_state_dict_post_hook(_post_hook)
        assert o.state_dict()["ran_state_dict_pre_hook"] is False
        o = make()
        o.register_state_dict_pre_hook(_pre_hook)
        o.register_state_dict_post_hook(_post_hook)
        sd = o.state_dict()
        assert "test" not in sd["state"] and sd["ran_state_dict_pre_hook"] is True
        o = make()
        sd = o.state_dict()
        o.register_load_state_dict_pre_hook(_load_pre1)
        o.load_state_dict(sd)
        assert o.param_groups[0]["lr"] == 0.002
        o.register_load_state_dict_pre_hook(_load_pre2, prepend=True)
        o.load_state_dict(sd)
        assert o.param_groups[0]["lr"] == 0.002
        o = make()
        o.register_load_state_dict_post_hook(_load_post)
        o.load_state_dict(o.state_dict())
        assert o.state["ran_load_state_dict_pre_hook2"] is False and o.state["ran_load_state_dict_post_hook"] is True
        o = make()
        o.register_load_state_dict_pre_hook(_load_pre2)
        o.register_load_state_dict_post_hook(_load_post)
        o.load_state_dict(o.state_dict())
        assert o.state["ran_load_state_dict_pre_hook2"] is True and o.state["ran_load_state_dict_post_hook"] is True


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_step_hooks(info, device):
    """torch's test_step_pre_hook, test_step_post_hook and test_step_all_hooks (global hooks too, in torch's
    order, beside a torch.optim.SGD)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    params = [torch.tensor([[1.0, 1.0], [1.0, 1.0]]) if info.matrix_only else torch.tensor([1.0, 1.0])]
    if info.name == "StiefelSGD":
        params = [torch.eye(2)]
    for kw in inputs(info, cliquey=True)[:3]:
        opt, data = entry(info, plain=True)(params, **kw, device=device), []
        h1 = opt.register_step_pre_hook(lambda *a, d=data: d.append("pre"))
        h2 = opt.register_step_post_hook(lambda *a, d=data: d.append("post"))
        opt.step()
        opt.step()
        h1.remove()
        h2.remove()
        opt.step()
        assert data == ["pre", "post", "pre", "post"]
        other, data = torch.optim.SGD(params), []
        handles = [register_optimizer_step_pre_hook(lambda *a, d=data: d.append(0)),
                   register_optimizer_step_post_hook(lambda *a, d=data: d.append(5))]
        handles += [o.register_step_pre_hook(lambda *a, d=data: d.append(1)) for o in (opt, other)]
        handles += [o.register_step_post_hook(lambda *a, d=data: d.append(2)) for o in (opt, other)]
        try:
            opt.step()
            other.step()
            opt.step()
        finally:
            for h in handles:
                h.remove()
        opt.step()
        assert data == [0, 1, 2, 5] * 3


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_deepcopy_copies_all_public_attrs_and_non_empty_state(info, device):
    """torch's test_deepcopy_copies_all_public_attrs and test_non_empty_state; the copy also steps as the
    original (its own device buffers)."""
    shape = (3, 2) if info.name == "StiefelSGD" else (2, 3)
    for kw in inputs(info, cliquey=True)[:3]:
        params = [Parameter(torch.linalg.qr(torch.randn(*shape))[0] if info.name == "StiefelSGD" else
                            torch.randn(*shape)) for _ in range(2)]
        for p in params:
            p.grad = torch.rand_like(p)
            sparsify(info, p)
        opt = entry(info, plain=True)(params, **kw, device=device)
        for _ in range(3):
            opt.step()
        other = copy.deepcopy(opt)
        assert {k for k in vars(opt) if not k.startswith("_")} == {k for k in vars(other) if not k.startswith("_")}
        assert len(opt.state) == 2 and all(len(s) > 0 for s in opt.state.values())
        copied = [p for g in other.param_groups for p in g["params"]]
        assert all(c is not p and torch.equal(c, p) for c, p in zip(copied, params))
        for c, p in zip(copied, params):
            c.grad = p.grad.clone()
        opt.step()
        other.step()
        for c, p in zip(copied, params):
            torch.testing.assert_close(c, p, rtol=0, atol=0)
