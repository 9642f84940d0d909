"""rlx_gpu's optimizers as entries of torch's ``optim_db`` (torch/testing/_internal/common_optimizers.py of torch
2.13): torch's own ``OptimizerInfo`` objects, whose constructor inputs and error inputs are torch's where torch has
the algorithm (NAdamW is torch's NAdam with ``decoupled_weight_decay=True``), and ours for the algorithms torch does
not have. ``foreach`` and ``fused`` are accepted switches here (every step is fused), so every entry lists both.
"""
import copy

import pytest

torch = pytest.importorskip("torch", reason="torch's optim_db is what these tests drive")
co = pytest.importorskip("torch.testing._internal.common_optimizers", reason="torch's optim_db needs expecttest")

import rlx_gpu  # noqa: E402
import rlx_gpu.torch as RT  # noqa: E402

from cases import TABLE  # noqa: E402

OptimizerInput = co.OptimizerInput
TORCH = {i.name: i for i in co.optim_db}
# rlx_gpu name -> torch's optim_db entry of the same algorithm
SAME = {"Adafactor": "Adafactor", "Adagrad": "Adagrad", "Adam": "Adam", "AdamW": "AdamW", "Muon": "Muon",
        "NAdamW": "NAdam", "RAdam": "RAdam", "RMSprop": "RMSprop", "SGD": "SGD", "SparseAdam": "SparseAdam"}
MATRIX_ONLY = ("Muon", "SOAP", "Kron", "StiefelSGD")

# torch's inputs that differ here on purpose (docs/guides/pytorch.md): tensor lr/betas with foreach=True
# are refused by torch's foreach kernels only; NAdam's coupled weight decay is not NAdamW.
DIFFERS = ("lr as Tensor doesn't work with foreach", "as a Tensor is not supported for capturable=False and foreach")


def _nadamw_inputs(device, dtype=None):
    out = []
    for i in TORCH["NAdam"].optim_inputs_func(device, dtype):
        if i.kwargs.get("weight_decay", 0) and not i.kwargs.get("decoupled_weight_decay", False):
            continue  # (torch's coupled decay: not NAdamW's)
        out.append(i)
    return out


def _ours(name):
    """Inputs for an algorithm torch does not have: the generic option sets of tests/cases.py."""
    sets = next((s for gpu, _, s, _ in TABLE if gpu.__name__ == name), [{}])
    return lambda device, dtype=None: [OptimizerInput(params=None, kwargs=dict(k), desc=str(k)) for k in sets]


MATRIX_INPUTS = {
    "SOAP": [{}, {"precondition_frequency": 2}, {"weight_decay": 0.0, "normalize_gradient": True}],
    "Kron": [{}, {"precond_update_prob": 1.0, "momentum": 0.5}],
    "StiefelSGD": [{"lr": 1e-2}, {"lr": 1e-2, "momentum": 0.9}, {"lr": 1e-2, "manifold": "canonical"}],
}


def _errors_for_all(device, dtype):
    """torch's error inputs shared by every optimizer (duplicates, names, tensor lr), 2-D params."""
    return co.get_error_inputs_for_all_optims(device, dtype)


def _info(name):
    cls = getattr(RT, name)
    t = TORCH.get(SAME.get(name))
    kw = dict(supported_impls=("foreach", "fused"), supports_fused_on=("cpu",),
              not_og_supported_flags=("foreach", "differentiable", "fused", "maximize", "capturable"))
    if t is not None:
        inputs = _nadamw_inputs if name == "NAdamW" else t.optim_inputs_func
        info = co.OptimizerInfo(cls, optim_inputs_func=inputs, optim_error_inputs_func=t.optim_error_inputs_func,
                                scheduler_inputs=t.scheduler_inputs, supports_sparse=t.supports_sparse,
                                only_supports_sparse_grads=t.only_supports_sparse_grads,
                                metadata_for_sparse=t.metadata_for_sparse, supports_complex=t.supports_complex, **kw)
    else:
        sets = MATRIX_INPUTS.get(name)
        inputs = (_ours(name) if sets is None else
                  (lambda device, dtype=None, s=sets: [OptimizerInput(None, dict(k), str(k)) for k in s]))
        info = co.OptimizerInfo(cls, optim_inputs_func=inputs, optim_error_inputs_func=_errors_for_all,
                                supports_complex=False, **kw)
    info.matrix_only = name in MATRIX_ONLY
    info.torch_name = SAME.get(name)
    return info


INFOS = [_info(n) for n in RT.__all__ if n != "Partition"]
IDS = [i.name for i in INFOS]


def inputs(info, cliquey=False, skip=("differentiable",)):
    """The constructor kwargs to test: torch's (or ours), with each of foreach/fused on where ``cliquey``."""
    if cliquey:
        got = co._get_optim_inputs_including_global_cliquey_kwargs("cpu", torch.float32, info, skip=skip)
    else:
        got = info.optim_inputs_func("cpu")
    return [copy.deepcopy(i.kwargs) for i in got]


def weight_bias(info, contiguous=True, dtype=torch.float32, seed=0):
    """torch's (10, 5) weight and (10,) bias (non-contiguous: slices of larger tensors, as torch's test); for the
    matrix-only optimizers the bias is a (10, 2) matrix (summed over its columns) and StiefelSGD's weight has
    orthonormal columns."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn((10, 5, 2) if not contiguous else (10, 5), generator=g, dtype=dtype)
    b = torch.randn((10, 2) if info.matrix_only else (10,), generator=g, dtype=dtype)
    if not contiguous:
        w = w[..., 0]
        b = torch.randn((10, 2, 2), generator=g, dtype=dtype)[..., 0] if info.matrix_only else \
            torch.randn((10, 2), generator=g, dtype=dtype)[..., 0]
    if info.name == "StiefelSGD":
        with torch.no_grad():
            w.copy_(torch.linalg.qr(w)[0])
            b.copy_(torch.linalg.qr(b)[0])
    return torch.nn.Parameter(w), torch.nn.Parameter(b)


def loss_of(w, b, x):
    return (w.mv(x) + (b.sum(1) if b.dim() == 2 else b)).pow(2).sum()


def sparsify(info, *params):
    if info.only_supports_sparse_grads:
        for p in params:
            if p.grad is not None:
                p.grad = p.grad.to_sparse()


def assert_equal(a, b, exact=False, where="") -> None:
    """torch's TestCase.assertEqual on nested state dicts: tensors within torch.testing's default tolerances (or
    exactly), containers item by item, anything else with ==."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        kw = dict(rtol=0, atol=0) if exact else {}
        torch.testing.assert_close(a, b, **kw, msg=lambda m: f"{where}: {m}")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys {list(a)} vs {list(b)}"
        for k in a:
            assert_equal(a[k], b[k], exact, f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal(x, y, exact, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} vs {b!r}"


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


def small_model(info, dtype):
    """torch's Linear-Sigmoid-Linear-Sigmoid model (matrix-only optimizers: no biases; StiefelSGD: orthonormal)."""
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


def lockstep(info, x, steps: int, a: tuple, b: tuple) -> None:
    """``steps`` steps of two (optimizer, weight, bias) runs on the same input, their params compared after each
    with torch's assertEqual tolerances (torch.testing's float32 defaults)."""
    for _ in range(steps):
        for o, w, bias in (a, b):
            closure_of(o, info, w, bias, x)()
        for o, _, _ in (a, b):
            o.step()
        torch.testing.assert_close(a[1], b[1])
        torch.testing.assert_close(a[2], b[2])
