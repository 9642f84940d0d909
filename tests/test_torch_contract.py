"""rlx_gpu's optimizers built from torch tensors are torch.optim.Optimizers (issue 22): non-contiguous params,
torch's switches and errors, add_param_group, copies and pickles, ``state`` keyed by the tensors, torch-format
state dicts for every class (lossless, weights_only), torch.optim's state dicts loaded directly, sparse grads in
torch's default layout, and nothing importing torch for NumPy-built optimizers. Tolerances at each assertion."""
import copy
import io
import pickle
import subprocess
import sys

import numpy as np
import pytest

import rlx_gpu

torch = pytest.importorskip("torch", reason="torch is what these tests drive")
pytestmark = pytest.mark.gpu


def close(a, b, rel):
    """|a - b| <= rel * max(1, max|b|) (the tensor's scale)."""
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).abs().max()) <= rel * max(1.0, float(b.abs().max()))


def train(runs, x, steps: int) -> None:
    """``steps`` steps of each (module, optimizer) on the mean squared output."""
    for mod, o in runs:
        for _ in range(steps):
            mod(x).pow(2).mean().backward()
            o.step()
            o.zero_grad()


class Strided(torch.nn.Module):
    """A conv in channels_last, a transposed leaf and a slice of a larger tensor: all non-contiguous."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
        self.t = torch.nn.Parameter(torch.randn(4, 6).t())
        self.s = torch.nn.Parameter(torch.randn(6, 2)[:, 0])
        self.c = torch.nn.Parameter(torch.randn(6))  # (contiguous: the zero-copy path)

    def forward(self, x):
        h = self.conv(x).mean((2, 3))  # (N, 4)
        return ((h @ self.t.t()) * self.s + self.c).pow(2).mean()


def test_non_contiguous_params_train_as_torch(device):
    """channels_last, a transposed leaf and a slice step as torch.optim.AdamW steps them (1e-5 of the scale, 30
    steps), their storage written in place; a contiguous param is written through a zero-copy view."""
    m, ref = Strided(), Strided()
    assert not m.conv.weight.is_contiguous() and not m.t.is_contiguous() and not m.s.is_contiguous()
    opt, topt = rlx_gpu.AdamW(m.parameters(), lr=1e-2, device=device), torch.optim.AdamW(ref.parameters(), lr=1e-2)
    ptrs = [p.data_ptr() for p in m.parameters()]
    x = torch.randn(8, 3, 5, 5)
    for _ in range(30):
        for mod, o in ((m, opt), (ref, topt)):
            mod(x).backward()
            o.step()
            o.zero_grad()
    for (n, p), q in zip(m.named_parameters(), ref.parameters()):
        assert close(p, q, 1e-5), n
    assert [p.data_ptr() for p in m.parameters()] == ptrs and not m.conv.weight.is_contiguous()
    view = opt._torch_views[opt._name_of[id(m.c)]]  # (the contiguous one: its NumPy view is the tensor's storage)
    assert np.shares_memory(view, m.c.detach().numpy())


def test_a_plain_class_works_with_torch_tools(device):
    """rlx_gpu.AdamW(model.parameters()) is a torch.optim.Optimizer: torch's schedulers and GradScaler take it
    (before: "AdamW is not an Optimizer" and GradScaler's AssertionError on str params)."""
    torch.manual_seed(1)
    m = torch.nn.Linear(4, 2)
    opt = rlx_gpu.AdamW(m.parameters(), lr=0.1, device=device)
    assert isinstance(opt, torch.optim.Optimizer) and isinstance(opt, rlx_gpu.AdamW)
    assert type(opt) is rlx_gpu.torch.AdamW and isinstance(rlx_gpu.AdamW({"w": np.ones(2, np.float32)},
                                                                          device=device), rlx_gpu.AdamW)
    sched, scaler = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5), torch.amp.GradScaler("cpu", init_scale=4.0)
    for _ in range(3):
        scaler.scale(m(torch.randn(3, 4)).sum()).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        opt.zero_grad()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 / 8) and int(opt.state_dict()["state"][0]["step"]) == 3


def test_torch_switches(device):
    """foreach/fused/capturable are accepted (every step is fused here) and kept in torch's groups;
    differentiable=True and fused with foreach are torch's RuntimeErrors; the NumPy classes take them too."""
    p = [torch.nn.Parameter(torch.ones(3))]
    opt = rlx_gpu.AdamW(p, foreach=True, capturable=True, device=device)
    assert opt.param_groups[0]["foreach"] is True and opt.param_groups[0]["fused"] is None
    rlx_gpu.AdamW(p, fused=True, device=device).step()
    rlx_gpu.reference.SGD({"w": np.ones(2, np.float32)}, foreach=False, fused=True)
    with pytest.raises(RuntimeError, match="`fused` does not support `differentiable`"):
        rlx_gpu.AdamW(p, differentiable=True, device=device)
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        rlx_gpu.SGD({"w": np.ones(2, np.float32)}, foreach=True, fused=True, device=device)


def test_hyperparameters_are_checked_before_params(device):
    """As torch: a bad hyperparameter is a ValueError even when the params are bad too (or None)."""
    for cls in (rlx_gpu.AdamW, rlx_gpu.reference.AdamW, rlx_gpu.torch.AdamW):
        with pytest.raises(ValueError, match="Invalid learning rate: -1"):
            cls(None, lr=-1)
        with pytest.raises(ValueError, match="Invalid learning rate: -1"):
            cls(torch.zeros(3), lr=-1)
        with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
            cls(None, lr=torch.tensor([1e-3, 1e-3]))


def test_a_non_leaf_tensor_is_refused(device):
    """Issue 21 item 9: rlx_gpu.SGD([leaf * 2]) stepped the intermediate and lost the update; now torch's
    ValueError, for the GPU class, the twin and Partition (a tensor that retains its grad is accepted, as torch)."""
    leaf = torch.ones(3, requires_grad=True)
    for make in (lambda p: rlx_gpu.SGD(p, device=device), lambda p: rlx_gpu.reference.SGD(p),
                 lambda p: rlx_gpu.Partition(p, lambda n, s: "a", {"a": (rlx_gpu.SGD, {})}, device=device)):
        with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
            make([leaf * 2])
    kept = leaf * 2
    kept.retain_grad()
    rlx_gpu.reference.SGD([kept])


def test_add_param_group_as_torch(device):
    """Groups added mid-run (torch.optim.SGD with momentum does the same): the first group's momentum carries
    over, the new group's options apply (1e-6 of the scale, 20 steps); a refused group changes nothing."""
    torch.manual_seed(2)
    m, ref = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Linear(5, 1)), None
    ref = copy.deepcopy(m)
    opt = rlx_gpu.SGD(m[0].parameters(), lr=0.05, momentum=0.9, device=device)
    topt = torch.optim.SGD(ref[0].parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(16, 4)
    for step in range(20):
        if step == 8:
            opt.add_param_group({"params": m[1].parameters(), "lr": 0.01})
            topt.add_param_group({"params": ref[1].parameters(), "lr": 0.01})
            before = opt.state_dict()
            with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
                opt.add_param_group({"params": [m[1].weight]})
            assert len(opt.param_groups) == 2
            torch.testing.assert_close(opt.state_dict()["state"], before["state"], rtol=0, atol=0)
        for mod, o in ((m, opt), (ref, topt)):
            mod(x).pow(2).mean().backward()
            o.step()
            o.zero_grad()
    for p, q in zip(m.parameters(), ref.parameters()):
        assert close(p, q, 1e-6)
    assert list(opt.params) == ["0", "1", "2", "3"] and opt.param_groups[1]["lr"] == 0.01


def _stepped(opt, grads, n=3):
    for _ in range(n):
        opt.step(grads)
    return opt


def test_deepcopy_and_pickle_every_kind(device):
    """copy.deepcopy: a new optimizer on the same device with copies of every buffer (before: the copy's step
    raised AttributeError); pickle: host copies, unpickled onto the default device. For NumPy-built GPU classes
    (8-bit states too), twins, and torch-built ones (a model and its optimizer copied together share the copied
    tensors)."""
    rng = np.random.default_rng(0)
    p = {"w": rng.standard_normal((70, 64)).astype(np.float32), "b": np.zeros(7, np.float32)}
    g = {n: rng.standard_normal(a.shape).astype(np.float32) for n, a in p.items()}
    for opt in (rlx_gpu.AdamW(p, state_bits=8, device=device, lr_scale={"b": 0.5}),
                rlx_gpu.reference.Adam(p, amsgrad=True), rlx_gpu.Adagrad(p, lr=0.1, device=device)):
        _stepped(opt, g)
        for other in (copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):
            assert type(other) is type(opt) and other.lr_scale == opt.lr_scale
            if opt.on_device:
                assert other.device is opt.device and other.params["w"] is not opt.params["w"]
            opt_sd, other_sd = opt.state_dict(), other.state_dict()
            for n in p:
                for k, v in opt_sd["state"][n].items():
                    np.testing.assert_array_equal(np.asarray(other_sd["state"][n][k]), np.asarray(v))
            _stepped(other, g, 1)
        _stepped(opt, g, 1)
        a, b = opt.read_params(), other.read_params()
        assert all(np.array_equal(a[n], b[n]) for n in p)
    torch.manual_seed(3)
    m = torch.nn.Linear(3, 2)
    opt = rlx_gpu.Adam(m.parameters(), lr=0.1, device=device)
    m(torch.randn(4, 3)).sum().backward()
    opt.step()
    m2, opt2 = copy.deepcopy((m, opt))
    assert all(q is r for q, r in zip(opt2.param_groups[0]["params"], m2.parameters()))
    assert all(p.data_ptr() != q.data_ptr() for p, q in zip(m.parameters(), m2.parameters()))
    opt3 = pickle.loads(pickle.dumps(opt))
    for o, mod in ((opt, m), (opt2, m2), (opt3, None)):
        params = list(mod.parameters()) if mod is not None else opt3.param_groups[0]["params"]
        for q in params:
            q.grad = torch.ones_like(q)
        o.step()
    for p, q, r in zip(m.parameters(), m2.parameters(), opt3.param_groups[0]["params"]):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
        torch.testing.assert_close(p, r, rtol=0, atol=0)


def test_state_is_keyed_by_the_tensors(device):
    """opt.state[p] reads the device state (as the state dict holds it); assigning loads it (checked: a wrong
    shape raises and changes nothing); del resets; other keys are kept as torch keeps them."""
    torch.manual_seed(4)
    m = torch.nn.Linear(3, 2)
    opt = rlx_gpu.Adam(m.parameters(), lr=0.1, device=device)
    assert len(opt.state) == 0 and opt.state[m.weight] == {}
    m(torch.randn(4, 3)).sum().backward()
    opt.step()
    st = opt.state[m.weight]
    assert set(st) == {"step", "exp_avg", "exp_avg_sq"} and int(st["step"]) == 1 and m.weight in opt.state
    torch.testing.assert_close(st["exp_avg"], opt.state_dict()["state"][0]["exp_avg"], rtol=0, atol=0)
    opt.state[m.weight] = dict(st, exp_avg=torch.full((2, 3), 0.5), step=torch.tensor(7.0))
    assert torch.equal(opt.state[m.weight]["exp_avg"], torch.full((2, 3), 0.5)) and int(opt.state[m.weight]["step"]) == 7
    with pytest.raises(ValueError, match="exp_avg of '0' has shape \\(3, 2\\), expected \\(2, 3\\)"):
        opt.state[m.weight] = dict(st, exp_avg=torch.zeros(3, 2))
    assert int(opt.state[m.weight]["step"]) == 7
    del opt.state[m.weight]
    assert m.weight not in opt.state and opt.state[m.bias] != {}
    opt.state["mine"] = 1
    assert opt.state_dict()["state"]["mine"] == 1 and list(opt.state) == [m.bias, "mine"]


MATRIX = ("Muon", "SOAP", "Kron", "StiefelSGD")


@pytest.mark.parametrize("name", [n for n in rlx_gpu.torch.__all__ if n != "Partition"])
def test_every_class_has_torch_format_state_dicts(name, device):
    """state_dict() (torch's format) and to_torch_state_dict work for every class (before: Adafactor, SOAP, Kron,
    Muon and StiefelSGD raised TypeError on dequantize=), load back, and survive torch.load(weights_only=True)."""
    torch.manual_seed(5)
    shape = (6, 4)
    w = torch.nn.Parameter(torch.linalg.qr(torch.randn(shape))[0] if name == "StiefelSGD" else torch.randn(shape))
    opt = getattr(rlx_gpu, name)([w], device=device)
    for _ in range(2):
        w.grad = torch.randn(shape).to_sparse() if name == "SparseAdam" else torch.randn(shape)
        opt.step()
    sd = opt.state_dict()
    assert list(sd["state"]) == [0] and all(isinstance(v, torch.Tensor) for v in sd["state"][0].values())
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    opt.load_state_dict(back)
    assert set(rlx_gpu.to_torch_state_dict(opt)["state"][0]) == set(sd["state"][0])
    np_opt = getattr(rlx_gpu, name)({"w": w.detach().numpy().copy()}, device=device)
    np_opt.load_state_dict(rlx_gpu.from_torch_state_dict(back, np_opt))
    assert set(rlx_gpu.to_torch_state_dict(np_opt)["state"][0]) == set(sd["state"][0])


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_states_are_lossless_in_torch_format(bits, device):
    """A torch-built 8-bit/4-bit AdamW's state dict keeps whatever arrays the state holds (codes as uint8
    tensors, float32 absmax and map), bit for bit through torch.save / torch.load(weights_only=True) into a fresh
    optimizer, which then steps exactly as the original."""
    torch.manual_seed(6)
    w0 = torch.randn(80, 64)
    ws = [torch.nn.Parameter(w0.clone()) for _ in range(2)]
    a = rlx_gpu.AdamW([ws[0]], state_bits=bits, device=device)
    grads = [torch.randn(80, 64) for _ in range(4)]
    for g in grads[:3]:
        ws[0].grad = g.clone()
        a.step()
    sd = a.state_dict()
    codes = [k for k in sd["state"][0] if k.endswith("_codes")]
    assert codes and all(sd["state"][0][k].dtype == torch.uint8 for k in codes)
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    with torch.no_grad():
        ws[1].copy_(ws[0])
    b = rlx_gpu.AdamW([ws[1]], state_bits=bits, device=device)
    b.load_state_dict(torch.load(buf, weights_only=True))
    for k, v in b.state_dict()["state"][0].items():
        assert torch.equal(v, sd["state"][0][k]), k
    for o, w in ((a, ws[0]), (b, ws[1])):
        w.grad = grads[3].clone()
        o.step()
    assert torch.equal(ws[0], ws[1])


def test_torch_optim_state_dicts_load_directly(device):
    """torch.optim.AdamW's state dict loads into a torch-built rlx_gpu.AdamW as it is, and the run continues as
    torch's (1e-5 of the scale); a NumPy-built optimizer says how to convert it."""
    torch.manual_seed(7)
    m = torch.nn.Linear(5, 3)
    ref = copy.deepcopy(m)
    topt, ropt = torch.optim.AdamW(m.parameters(), lr=1e-2), torch.optim.AdamW(ref.parameters(), lr=1e-2)
    x = torch.randn(8, 5)
    train(((m, topt), (ref, ropt)), x, 5)
    opt = rlx_gpu.AdamW(m.parameters(), lr=1e-2, device=device)
    opt.load_state_dict(topt.state_dict())
    train(((m, opt), (ref, ropt)), x, 5)
    assert all(close(p, q, 1e-5) for p, q in zip(m.parameters(), ref.parameters()))
    np_opt = rlx_gpu.AdamW({"w": np.ones((3, 5), np.float32), "b": np.ones(3, np.float32)}, device=device)
    with pytest.raises(ValueError, match="torch.optim's format .* rlx_gpu.from_torch_state_dict"):
        np_opt.load_state_dict(topt.state_dict())


def test_sparse_grads_in_torchs_default_layout(device):
    """.to_sparse() on a 2-D grad (two sparse dims) as torch.optim.SparseAdam takes it: only the touched entries
    change (2e-6 relative: torch's vectorised CPU sqrt, docs/guides/memory.md)."""
    torch.manual_seed(8)
    w, wt = torch.nn.Parameter(torch.randn(6, 4)), None
    wt = torch.nn.Parameter(w.detach().clone())
    opt, topt = rlx_gpu.SparseAdam([w], lr=0.01, device=device), torch.optim.SparseAdam([wt], lr=0.01)
    for _ in range(10):
        dense = torch.randn(6, 4) * (torch.rand(6, 4) < 0.3)
        for p, o in ((w, opt), (wt, topt)):
            p.grad = dense.to_sparse()
            assert p.grad.sparse_dim() == 2
            o.step()
    torch.testing.assert_close(w, wt, rtol=2e-6, atol=1e-7)
    torch.testing.assert_close(opt.state[w]["exp_avg"], topt.state[wt]["exp_avg"], rtol=2e-6, atol=1e-7)


def test_numpy_built_optimizers_never_import_torch(tmp_path):
    """rlx_gpu imports and works with torch blocked (an ImportError on import): NumPy-built GPU classes, twins,
    Partition, copies, checkpoints."""
    code = f"""
import sys, copy, pickle
sys.modules['torch'] = None
import numpy as np, rlx_gpu
p = {{'w': np.ones((4, 3), np.float32), 'b': np.zeros(3, np.float32)}}
g = {{k: np.ones_like(v) for k, v in p.items()}}
def label(n, s):
    return 'm' if len(s) == 2 else 'a'
for o in (rlx_gpu.AdamW(p), rlx_gpu.reference.LAMB(p),
          rlx_gpu.Partition(p, label, {{'m': (rlx_gpu.Muon, {{}}), 'a': rlx_gpu.SGD}}),
          rlx_gpu.reference.Partition(p, label, {{'m': rlx_gpu.Muon, 'a': rlx_gpu.SGD}})):
    o.step(g); copy.deepcopy(o); pickle.loads(pickle.dumps(o))
    o.save(r'{tmp_path}/ck'); o.restore(r'{tmp_path}/ck')
assert sys.modules['torch'] is None
print('ok')
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_add_param_group_numpy_built(twin, device):
    """NumPy-built optimizers take add_param_group too: the run equals one built with both groups whose second
    group had no grads before (bit for bit on the same adapter)."""
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    make = (lambda g: rlx_gpu.reference.Adam(g, lr=0.1)) if twin else (lambda g: rlx_gpu.Adam(g, lr=0.1, device=device))
    grown, whole = make({"a": a}), make([{"params": {"a": a}}, {"params": {"b": b}, "lr": 0.01}])
    for s in range(5):
        if s == 2:
            grown.add_param_group({"params": {"b": b}, "lr": 0.01})
            with pytest.raises(ValueError, match="'a' appears more than once"):
                grown.add_param_group({"params": {"a": a}})
        g = {"a": rng.standard_normal((5, 3)).astype(np.float32)}
        if s >= 2:
            g["b"] = rng.standard_normal(4).astype(np.float32)
        grown.step(g)
        whole.step(g)
    x, y = grown.read_params(), whole.read_params()
    assert all(np.array_equal(x[n], y[n]) for n in ("a", "b")) and grown.param_groups[1]["lr"] == 0.01


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_torch_sgd_state_dicts_load_directly(momentum, device):
    """torch.optim.SGD keeps no step count (and, without momentum, maybe a None buffer): its state dict loads as it
    is (step 1 where a buffer exists, as from_torch_state_dict does) and the run continues as torch's (1e-5)."""
    torch.manual_seed(10)
    m = torch.nn.Linear(4, 3)
    ref = copy.deepcopy(m)
    topt, ropt = (torch.optim.SGD(mod.parameters(), lr=0.05, momentum=momentum) for mod in (m, ref))
    x = torch.randn(8, 4)
    train(((m, topt), (ref, ropt)), x, 3)
    sd = topt.state_dict()
    if momentum == 0:
        sd["state"] = {i: {"momentum_buffer": None} for i in range(2)}  # (what older torch keeps)
    opt = rlx_gpu.SGD(m.parameters(), lr=0.05, momentum=momentum, device=device)
    opt.load_state_dict(sd)
    train(((m, opt), (ref, ropt)), x, 3)
    assert all(close(p, q, 1e-5) for p, q in zip(m.parameters(), ref.parameters()))
