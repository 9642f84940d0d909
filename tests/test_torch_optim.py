"""torch's own optimizer tests, run on rlx_gpu's (the algorithm side; state dicts, hooks and copies:
tests/test_torch_optim_state.py): ports of torch 2.13's test/test_optim.py TestOptimRenewed
(pytorch/pytorch) over tests/torch_db.py (torch's optim_db entries and inputs for the algorithms torch has, ours for
the others), every class through ``rlx_gpu.torch.<Name>`` and through ``rlx_gpu.<Name>(tensors)`` (the same class).
torch's thresholds are kept: exact equality where torch asserts equality of two runs, torch.testing's default
float32 tolerances where torch's assertEqual compares tensors, "the loss went down" where torch checks that. What
is not ported: CUDA/multi-GPU/compile tests, float64 runs (WGSL has no float64: float32 instead), mocks of torch's
foreach kernels, meta-device params. Differences on purpose are listed in docs/guides/pytorch.md.
"""
import functools

import pytest

from torch_db import (DIFFERS, IDS, INFOS, closure_of, co, entry, inputs, lockstep, small_model, sparsify, torch,
                      weight_bias)

pytestmark = pytest.mark.gpu
Parameter = torch.nn.Parameter


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
        lockstep(info, x, 5, (ref, w, b), (opt, wc, bc))


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
            m = small_model(info, dtype)
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
