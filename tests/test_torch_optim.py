"""torch's own optimizer tests, run on rlx_gpu's: ports of torch 2.13's test/test_optim.py TestOptimRenewed
(pytorch/pytorch) over tests/torch_db.py (torch's optim_db entries and inputs for the algorithms torch has, ours for
the others), every class through ``rlx_gpu.torch.<Name>`` and through ``rlx_gpu.<Name>(tensors)`` (the same class).
torch's thresholds are kept: exact equality where torch asserts equality of two runs, torch.testing's default
float32 tolerances where torch's assertEqual compares tensors, "the loss went down" where torch checks that. What
is not ported: CUDA/multi-GPU/compile tests, float64 runs (WGSL has no float64: float32 instead), mocks of torch's
foreach kernels, meta-device params. Differences on purpose are listed in README's "Using it from PyTorch".
"""
import functools
import re
import warnings

import pytest

from torch_db import DIFFERS, IDS, INFOS, assert_equal, co, inputs, loss_of, sparsify, torch, weight_bias

import rlx_gpu

pytestmark = pytest.mark.gpu
Parameter = torch.nn.Parameter


def entry(info, plain: bool):
    """The class, or rlx_gpu.<Name> (which makes the same class from tensors)."""
    return getattr(rlx_gpu, info.name) if plain else info.optim_cls


def closure_of(opt, info, w, b, x):
    def closure():
        opt.zero_grad()
        loss = loss_of(w, b, x)
        loss.backward()
        sparsify(info, w, b)
        return loss
    return closure


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_errors(info):
    """torch's error inputs (types and messages), construction and step."""
    for plain in (False, True):
        cls = entry(info, plain)
        for e in info.optim_error_inputs_func(device="cpu", dtype=torch.float32):
            inp = e.optimizer_error_input
            if any(d in inp.desc for d in DIFFERS):
                continue
            params = inp.params
            if info.matrix_only and params is not None and info.name != "Muon":
                continue  # (torch's 1x1 samples: Kron and Stiefel need larger matrices)
            if issubclass(e.error_type, Warning):
                with pytest.warns(e.error_type, match=e.error_regex):
                    o = cls(params, **inp.kwargs)
                    if e.error_on == co.OptimizerErrorEnum.STEP_ERROR:
                        o.step()
                continue
            with pytest.raises(e.error_type, match=e.error_regex):
                o = cls(params, **inp.kwargs)
                if e.error_on == co.OptimizerErrorEnum.STEP_ERROR:
                    o.step()


@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_forloop_goes_right_direction(info, contiguous, device):
    """20 steps lower the loss (raise it with maximize), with and without torch's schedulers; contiguous and
    non-contiguous params (slices of larger tensors)."""
    scheds = [None] + (list(info.scheduler_inputs[:1]) if contiguous else [])
    x = torch.randn(5, generator=torch.Generator().manual_seed(3))
    for k, sched in enumerate(scheds):
        for kw in inputs(info):
            w, b = weight_bias(info, contiguous)
            opt = entry(info, plain=k % 2 == 0)([w, b], **kw, device=device)
            ss = [s(opt) for s in (sched or [])]
            closure = closure_of(opt, info, w, b, x)
            initial = closure().item()
            for _ in range(20):
                loss = closure()
                opt.step()
                for s in ss:
                    s.step(loss) if isinstance(s, torch.optim.lr_scheduler.ReduceLROnPlateau) else s.step()
            final = closure().item()
            assert (final > initial) if kw.get("maximize", False) else (final < initial), (kw, sched)


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_param_group_with_lrscheduler_goes_right_direction(info, device):
    x = torch.randn(5)
    for scheds in info.scheduler_inputs[:2]:
        w, b = weight_bias(info)
        opt = info.optim_cls([{"params": [w]}, {"params": [b], "lr": 0.01}], device=device)
        ss = [s(opt) for s in scheds]
        closure = closure_of(opt, info, w, b, x)
        initial = closure().item()
        for _ in range(20):
            loss = opt.step(closure)
            for s in ss:
                s.step(loss) if isinstance(s, torch.optim.lr_scheduler.ReduceLROnPlateau) else s.step()
        assert closure().item() < initial


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_tensor_lr(info, device):
    """lr=torch.tensor(1e-3) steps as lr=1e-3 (torch's assertEqual: float32 tolerances; the tensor holds
    float32(1e-3))."""
    torch.manual_seed(0)
    for kw in inputs(info, cliquey=True):
        # (SOAP's host eigenbases amplify float32(1e-3) != 1e-3 past any tolerance: an lr float32 holds exactly)
        kw["lr"] = {"StiefelSGD": 1e-2, "SOAP": 2.0 ** -10}.get(info.name, 1e-3)
        w, b = weight_bias(info)
        wc, bc = (Parameter(t.detach().clone()) for t in (w, b))
        x = torch.randn(5)
        ref = info.optim_cls([w, b], **kw, device=device)
        kw["lr"] = torch.tensor(kw["lr"])
        opt = entry(info, plain=True)([wc, bc], **kw, device=device)
        for _ in range(5):
            closure_of(ref, info, w, b, x)()
            closure_of(opt, info, wc, bc, x)()
            ref.step()
            opt.step()
            torch.testing.assert_close(w, wc)
            torch.testing.assert_close(b, bc)


def _rosenbrock(t):
    x, y = t
    return (1 - x) ** 2 + 100 * (y - x ** 2) ** 2


def _drosenbrock(t):
    x, y = t
    return torch.stack((-400 * x * (y - x ** 2) - 2 * (1 - x), 200 * (y - x ** 2)))


@pytest.mark.parametrize("info", [i for i in INFOS if i.supports_sparse or i.only_supports_sparse_grads],
                         ids=lambda i: i.name)
def test_rosenbrock_sparse(info, device):
    """Cyclic coordinate descent on Rosenbrock with uncoalesced sparse grads (torch's torture test): the sparse
    run equals the dense one every step (5e-6, torch's) and torch.optim's own sparse run (5e-6), and the distance
    to the minimum goes down as torch's does (the loss up with maximize). 400 of torch's 1800 iterations for the
    first config, 100 for the others (a GPU step each)."""
    kw_up, _ = info.metadata_for_sparse
    configs = []
    for kw in inputs(info):
        for k in kw_up:
            kw.pop(k, None)
        if kw or not configs:
            configs.append(dict(kw, **kw_up))
    ref_cls = getattr(torch.optim, info.torch_name)
    for n, kw in enumerate(configs[:3]):
        p, pc, pt = (Parameter(torch.tensor([1.5, 1.5])) for _ in range(3))
        opt = info.optim_cls([p], **kw, device=device)
        optc = None if info.only_supports_sparse_grads else info.optim_cls([pc], **kw, device=device)
        ref = ref_cls([pt], **kw)
        initial = p.detach().dist(torch.tensor([1.0, 1.0]))
        for i in range(400 if n == 0 else 100):
            for o, q, sparse in ((opt, p, True), (optc, pc, False), (ref, pt, True)):
                if o is not None:
                    o.step(functools.partial(_rosenbrock_closure, o, q, sparse, i % 2))
            torch.testing.assert_close(p, pt, atol=5e-6, rtol=5e-6)
            if optc is not None:
                torch.testing.assert_close(p, pc, atol=5e-6, rtol=5e-6)
        if kw.get("maximize", False):
            assert _rosenbrock(p.detach()) >= _rosenbrock(torch.tensor([1.5, 1.5])), kw
        else:
            solution = torch.tensor([1.0, 1.0])
            assert (p.detach().dist(solution) <= initial) == (pt.detach().dist(solution) <= initial), kw


def _rosenbrock_grad(param, sparse, w):
    g = _drosenbrock(param.detach())
    if not sparse:
        return torch.tensor([g[0], 0.0]) if w else torch.tensor([0.0, g[1]])
    i, v = (torch.tensor([[0, 0]]), torch.tensor([g[0] / 4.0, g[0] - g[0] / 4.0])) if w else \
        (torch.tensor([[1, 1]]), torch.tensor([g[1] - g[1] / 4.0, g[1] / 4.0]))
    return torch.sparse_coo_tensor(i, v, (2,))


def _rosenbrock_closure(o, param, sparse, w):
    o.zero_grad()
    loss = _rosenbrock(param)
    loss.backward()
    param.grad = _rosenbrock_grad(param, sparse, w)
    return loss


@pytest.mark.parametrize("info", [i for i in INFOS if i.supports_complex], ids=lambda i: i.name)
def test_complex(info, device):
    """Complex params step as their view_as_real, bit for bit (torch's own definition), mixed with a real one."""
    for kw in inputs(info):
        torch.manual_seed(0)
        cparams = [torch.randn(10, 5, dtype=torch.complex64, requires_grad=True),
                   torch.randn(10, dtype=torch.complex64, requires_grad=True),
                   torch.randn(10, 5, requires_grad=True)]
        rparams = [(torch.view_as_real(p) if p.is_complex() else p).detach().clone().requires_grad_()
                   for p in cparams]
        copt, ropt = info.optim_cls(cparams, **kw, device=device), info.optim_cls(rparams, **kw, device=device)
        for _ in range(3):
            for c, r in zip(cparams, rparams):
                r.grad = torch.randn_like(r)
                c.grad = torch.view_as_complex(r.grad.clone()) if c.is_complex() else r.grad.clone()
            ropt.step()
            copt.step()
        for c, r in zip(cparams, rparams):
            torch.testing.assert_close(torch.view_as_real(c) if c.is_complex() else c, r, rtol=0, atol=0)
        st = copt.state[cparams[0]]
        assert all(v.is_complex() for k, v in st.items() if k != "step" and v.dim()), kw  # (torch keeps them complex)


@pytest.mark.parametrize("info", [i for i in INFOS if i.supports_complex], ids=lambda i: i.name)
def test_complex_2d(info, device):
    """A complex pair against its real and imaginary parts as two real params (torch's test, 3 steps)."""
    for kw in inputs(info):
        a1 = torch.randn(2, dtype=torch.complex64, requires_grad=True)
        re_, im = (t.detach().clone().requires_grad_() for t in (a1.real, a1.imag))
        o1, o2 = info.optim_cls([a1], **kw, device=device), info.optim_cls([re_, im], **kw, device=device)
        for _ in range(3):
            o1.zero_grad()
            o2.zero_grad()
            _rosenbrock(a1).abs().backward()
            _rosenbrock(torch.complex(re_, im)).abs().backward()
            torch.testing.assert_close(a1.grad.real, re_.grad)
            torch.testing.assert_close(a1.grad.imag, im.grad)
            o1.step()
            o2.step()
            torch.testing.assert_close(a1.real, re_)
            torch.testing.assert_close(a1.imag, im)


def _model(info, dtype):
    torch.manual_seed(1)
    if info.matrix_only:
        m = torch.nn.Sequential(torch.nn.Linear(2, 3, bias=False), torch.nn.Sigmoid(), torch.nn.Linear(3, 3, bias=False),
                                torch.nn.Sigmoid())
        if info.name == "StiefelSGD":
            with torch.no_grad():
                for p in m.parameters():
                    q = torch.linalg.qr(p if p.shape[0] >= p.shape[1] else p.t())[0]
                    p.copy_(q if p.shape[0] >= p.shape[1] else q.t())
        return m.to(dtype)
    return torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Sigmoid(), torch.nn.Linear(3, 1),
                               torch.nn.Sigmoid()).to(dtype)


def _compare_between(models, optimizers, x, info):
    """torch's _compare_between: 7 iterations (a layer frozen at 3, thawed at 5; no grads at 2), params and every
    state buffer equal (both runs are rlx_gpu's: bit for bit)."""
    for i in range(7):
        for m, o in zip(models, optimizers):
            o.zero_grad()
            if i == 3:
                m[2].requires_grad_(False)
            if i == 5:
                m[2].requires_grad_(True)
            if i != 2:
                m(x).sum().backward()
                sparsify(info, *m.parameters())
            o.step()
        for p, q in zip(models[0].parameters(), models[1].parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
            a, b = optimizers[0].state[p], optimizers[1].state[q]
            assert a.keys() == b.keys()
            for k in a:
                torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)


@pytest.mark.parametrize("flag,dtype", [("foreach", torch.float32), ("fused", torch.bfloat16)])
@pytest.mark.parametrize("info", [i for i in INFOS if not i.only_supports_sparse_grads and not i.matrix_only],
                         ids=lambda i: i.name)
def test_foreach_and_fused_match_forloop(info, flag, dtype, device):
    """torch's test_{foreach,fused}_matches_forloop: the switch changes nothing here (one fused engine); a 0-d
    param with a grad rides along, as torch's test has it. (float32 for torch's float64.)"""
    if dtype != torch.float32 and info.name in ("SparseAdam",):
        pytest.skip("sparse updates take float32 params")
    x = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], dtype=dtype).reshape(3, 2)
    for kw in inputs(info)[:4]:
        models, opts = [], []
        for v in (False, True):
            m = _model(info, dtype)
            empty = torch.empty((), dtype=dtype, requires_grad=True)
            empty.grad = torch.rand_like(empty)
            opts.append(entry(info, plain=v)(list(m.parameters()) + [empty], **{**kw, flag: v}, device=device))
            models.append(m)
        _compare_between(models, opts, x, info)


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_param_groups_weight_decay_and_lr(info, device):
    """torch's test_param_groups_weight_decay and test_param_groups_lr: per-group hyperparameters; a group at
    lr 1e-28 does not move."""
    x = torch.randn(5)
    for kw in inputs(info)[:3]:
        w, b = weight_bias(info)
        bias_kw = dict(kw, weight_decay=0.0) if "weight_decay" in info.optim_cls.spec.defaults else dict(kw)
        opt = info.optim_cls([dict(params=[w], **kw), dict(params=[b], **bias_kw)], device=device)
        closure = closure_of(opt, info, w, b, x)
        initial = closure().item()
        for _ in range(20):
            closure()
            opt.step()
        assert (closure().item() > initial) if kw.get("maximize", False) else (closure().item() < initial)
        if info.name == "StiefelSGD":
            continue  # (a retraction keeps X on the manifold whatever lr is: X changes at lr 1e-28 by rounding)
        w, b = weight_bias(info)
        other = Parameter(torch.randn(2, 2) if info.matrix_only or info.name == "Mars" else torch.randn(2))
        keep = other.detach().clone()
        opt = entry(info, plain=True)([dict(params=[w, b], **{"lr": 1e-3, **kw}), dict(params=[other])], lr=1e-28,
                                      device=device)
        for _ in range(5):
            closure_of(opt, info, w, b, x)()
            other.grad = torch.rand_like(other)
            sparsify(info, other)
            opt.step()
        torch.testing.assert_close(other, keep)


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_step_is_noop_without_grads_and_for_zero_grads(info, device):
    for kw in inputs(info, cliquey=True):
        params = [torch.randn(2, 3) for _ in range(2)]
        if info.name == "StiefelSGD":
            params = [torch.linalg.qr(torch.randn(3, 2))[0] for _ in range(2)]
        old = [p.clone() for p in params]
        opt = info.optim_cls(params, **kw, device=device)
        assert opt.step(lambda: torch.tensor([1.0])).item() == 1.0
        for p, q in zip(params, old):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
        if kw.get("weight_decay", info.optim_cls.spec.defaults.get("weight_decay", 0)) != 0:
            continue  # (decay moves params without grads, as in torch)
        p = torch.randn((5, 2) if info.matrix_only else (5, 1), requires_grad=True)
        if info.name == "StiefelSGD":
            p = torch.linalg.qr(torch.randn(5, 2))[0].requires_grad_()
        old = p.detach().clone()
        opt = entry(info, plain=True)([p], **kw, device=device)
        p.grad = (torch.sparse_coo_tensor(torch.empty((1, 0), dtype=torch.int64), torch.empty((0, 1)), (5, 1))
                  if info.only_supports_sparse_grads else torch.zeros_like(p))
        opt.step(lambda: torch.tensor([1.0]))
        if info.name not in ("Lion", "Kron", "SOAP", "SophiaH", "Mars", "LAMB", "QHAdamW", "StiefelSGD", "Muon"):
            torch.testing.assert_close(p, old, rtol=0, atol=0)  # (torch's algorithms: zero grads move nothing)


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_optimizer_can_be_printed(info, device):
    p = [Parameter(torch.randn(2, 3)) for _ in range(2)]
    for kw in inputs(info, cliquey=True)[:3]:
        text = repr(entry(info, plain=True)(p if info.name != "StiefelSGD" else
                                            [Parameter(torch.linalg.qr(torch.randn(3, 2))[0])], **kw, device=device))
        assert text.startswith(info.name) and "Parameter Group 0" in text


def _conv_model(info):
    torch.manual_seed(1)
    if info.matrix_only:
        return _model(info, torch.float32), torch.rand(3, 2)
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
    import copy
    sd = copy.deepcopy(sd)
    for g in sd["param_groups"]:
        g.pop("param_names", None)
    return sd


@pytest.mark.parametrize("named0,named1", [(True, False), (False, True)])
@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_state_dict_deterministic(info, named0, named1, device):
    """A state dict loaded into a second optimizer over clones: the two run identically for 10 steps and their
    state dicts are equal (param names aside); repeated groups pack as torch packs them."""
    import copy
    if info.name == "Kron" and named0 != named1:
        pytest.skip("Kron's probes are keyed by tensor names (README): named and unnamed runs draw differently")
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
        for _ in range(10):
            closure_of(opt, info, w, b, x)()
            closure_of(optc, info, wc, bc, x)()
            opt.step()
            optc.step()
            torch.testing.assert_close(w, wc)
            torch.testing.assert_close(b, bc)
        assert_equal(_strip_names(opt.state_dict()), _strip_names(optc.state_dict()))
        optc.param_groups.extend(optc.param_groups)
        assert _strip_names(opt.state_dict())["param_groups"][-1] == _strip_names(optc.state_dict())["param_groups"][-1]


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_can_load_older_state_dict_and_named(info, device):
    """torch's test_can_load_older_state_dict (the newer flags deleted) and test_can_load_from_to_named_state_dict
    (param_names kept where either side has them)."""
    import copy
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
    import copy
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
    import copy
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

        def make():
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
        h1 = opt.register_step_pre_hook(lambda *a: data.append("pre"))
        h2 = opt.register_step_post_hook(lambda *a: data.append("post"))
        opt.step()
        opt.step()
        h1.remove()
        h2.remove()
        opt.step()
        assert data == ["pre", "post", "pre", "post"]
        other, data = torch.optim.SGD(params), []
        handles = [register_optimizer_step_pre_hook(lambda *a: data.append(0)),
                   register_optimizer_step_post_hook(lambda *a: data.append(5))]
        handles += [o.register_step_pre_hook(lambda *a: data.append(1)) for o in (opt, other)]
        handles += [o.register_step_post_hook(lambda *a: data.append(2)) for o in (opt, other)]
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
    import copy
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
