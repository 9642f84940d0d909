"""Extreme values and NaN: the GPU, the twin and the reference implementation (torch where it has the optimizer)
give the same NaNs, infinities and finite values for grads and params of +-1e30, 1e-30, denormals and mixed signs,
and the clip treats a NaN or an overflowing grad as torch's clip_grad_norm_ does.

Tolerances: finite values as the parity table (``cases.RTOL``/``ATOL``); NaN and inf must sit at the same places
with the same signs. Rows holding tiny values or denormals also allow an absolute difference of ``FTZ_ATOL``.

Denormals: WGSL lets a GPU flush denormal floats to zero, in its inputs and its results (llvmpipe keeps them; the
H200 flushes). Where a probe kernel finds that the adapter flushes, the twin is given the inputs as the GPU reads
them (denormal params and grads as 0): a denormal grad is then no grad for Lion's sign and no denominator for an
eps of 0 on both sides. The option sets below avoid hyperparameters that are denormal in a kernel (Adafactor's
eps1 = 1e-20 squares to 1e-40; QHAdamW's eps = 0 divides by a flushed 0); the parity table runs those with
normal values."""
import math

import numpy as np
import pytest

import rlx_gpu
from cases import ATOL, RTOL, TABLE, case_id
from optimizer_db import DB
from helpers import torch_clip

FTZ_ATOL = 1e-30

# value generators: (name, function(rng, shape) -> float32 array, holds tiny values or denormals)
ROWS = [
    ("huge", lambda rng, s: (rng.choice([-1, 1], s) * 1e30).astype(np.float32), False),
    ("tiny", lambda rng, s: (rng.choice([-1, 1], s) * 1e-30).astype(np.float32), True),
    ("denormal", lambda rng, s: (rng.choice([-1, 1], s) * 1e-40).astype(np.float32), True),
    ("mixed", lambda rng, s: rng.choice(np.array([-1e30, 1e30, 1e-30, -1e-40, -1.0, 0.0, 3.0], np.float32), s), True),
]
PARAMS = [("normal params", lambda rng, s: rng.standard_normal(s).astype(np.float32)), ("extreme params", ROWS[3][1])]
SHAPES = {"a": (5, 7), "b": (33,)}  # a matrix (MARS, Adafactor factored) and a vector
# Each optimizer's most involved option set, without hyperparameters that are denormal inside a kernel
DENORMAL_HYPER = {r.name: r.denormal_hyper for r in DB if r.denormal_hyper}  # (tests/optimizer_db.py)
EXTREME_CASES = [(g, t, dict(sets[-1], **DENORMAL_HYPER.get(g.__name__, {}))) for g, t, sets, _ in TABLE]
TINY = np.finfo(np.float32).tiny


def flushes_denormals(device) -> bool:
    """Whether ``device`` flushes denormal inputs or results to zero (a probe kernel: 1e-40 * 1, 1e-20 * 1e-20)."""
    code = ("@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n"
            "@compute @workgroup_size(1) fn main() { x[3] = x[0] * x[1]; x[4] = x[2] * x[2]; }")
    buf = device.buffer(32, "denormal probe", data=np.array([1e-40, 1.0, 1e-20, 7, 7, 0, 0, 0], np.float32))
    rlx_gpu.Program(device, code, "main", label="denormal probe")(1, x=buf)
    out = device.read(buf, 0, 32).view(np.float32)
    return bool(out[3] == 0 or out[4] == 0)


def flushed(x):
    return np.where(np.abs(x) < TINY, np.float32(0), x).astype(np.float32)


def assert_ieee_close(actual, desired, msg, tiny=False):
    """NaN and inf at the same places (inf with its sign); finite values within the parity tolerance."""
    actual, desired = np.asarray(actual, np.float32), np.asarray(desired, np.float32)
    assert actual.shape == desired.shape, msg
    nan_a, nan_d = np.isnan(actual), np.isnan(desired)
    assert (nan_a == nan_d).all(), f"{msg}: NaN at {np.flatnonzero(nan_a != nan_d)[:8]} (actual {nan_a.sum()}, " \
                                   f"desired {nan_d.sum()})"
    inf_a, inf_d = np.isinf(actual), np.isinf(desired)
    assert (inf_a == inf_d).all() and (actual[inf_a] == desired[inf_d]).all(), f"{msg}: infinities differ"
    fin = np.isfinite(desired)
    d = desired[fin].astype(np.float64)
    atol = ATOL * max(1.0, float(np.abs(d).max(initial=0.0))) + (FTZ_ATOL if tiny else 0.0)
    np.testing.assert_allclose(actual[fin], d, rtol=RTOL, atol=atol, err_msg=msg)


def run_pair(a, b, pname, pf, gf, steps=4, flush_b=False):
    """Optimizers ``a`` and ``b`` over the same params and grads (``b`` given them denormal-flushed if asked)."""
    rng = np.random.default_rng(0)
    params = {n: pf(rng, s) for n, s in SHAPES.items()}
    fb = (lambda d: {n: flushed(v) for n, v in d.items()}) if flush_b else (lambda d: d)
    a, b = a(params), b(fb(params))
    for s in range(steps):
        g = {n: gf(rng, v.shape) for n, v in params.items()}
        for o, gg in ((a, g), (b, fb(g))):
            if hasattr(o, "update_hessian") and s % 2 == 0:  # Sophia-H: the same extreme values as estimates
                o.update_hessian(gg)
            o.step(gg)
    return a, b


@pytest.mark.gpu
@pytest.mark.parametrize("pname,pf", PARAMS, ids=[p[0] for p in PARAMS])
@pytest.mark.parametrize("rname,gf,tiny", ROWS, ids=[r[0] for r in ROWS])
@pytest.mark.parametrize("gpu_cls,twin_cls,opts", EXTREME_CASES, ids=case_id)
def test_gpu_matches_twin_on_extreme_values(gpu_cls, twin_cls, opts, rname, gf, tiny, pname, pf, device, ftz):
    gpu, twin = run_pair(lambda p: gpu_cls(p, **opts, device=device), lambda p: twin_cls(p, **opts), pname, pf, gf,
                         flush_b=ftz)
    tiny = tiny or pname == "extreme params"
    for n in SHAPES:
        assert_ieee_close(gpu.params[n].numpy(), twin.params[n], f"{gpu_cls.__name__} {rname} param {n}", tiny)
    gs, ts = gpu.state_dict()["state"], twin.state_dict()["state"]
    for n in SHAPES:
        for k, v in ts[n].items():
            if k != "step":
                assert_ieee_close(gs[n][k], v, f"{gpu_cls.__name__} {rname} {k} of {n}", tiny)


@pytest.fixture(scope="module")
def ftz(device):
    return flushes_denormals(device)


TORCH = [("Adam", {}), ("Adam", {"amsgrad": True, "weight_decay": 0.1}), ("AdamW", {}), ("SGD", {"momentum": 0.9}),
         ("RMSprop", {}), ("RMSprop", {"centered": True, "momentum": 0.5, "weight_decay": 0.1}), ("Adagrad", {}),
         ("NAdam", {}), ("RAdam", {}), ("Adafactor", {}), ("Adafactor", {"weight_decay": 0.1})]
TWIN_OF = {"NAdam": "NAdamW"}


@pytest.mark.parametrize("pname,pf", PARAMS, ids=[p[0] for p in PARAMS])
@pytest.mark.parametrize("rname,gf,tiny", ROWS, ids=[r[0] for r in ROWS])
@pytest.mark.parametrize("torch_name,opts", TORCH, ids=lambda v: v if isinstance(v, str) else case_id(v))
def test_twin_matches_torch_on_extreme_values(torch_name, opts, rname, gf, tiny, pname, pf):
    torch = pytest.importorskip("torch", reason="torch is the oracle here")
    twin_cls = getattr(rlx_gpu.reference, TWIN_OF.get(torch_name, torch_name))
    extra = {"decoupled_weight_decay": True} if torch_name == "NAdam" else {}

    class TorchOpt:  # torch.optim behind the twin's step(dict) interface
        def __init__(self, params):
            self.t = {n: torch.tensor(v, requires_grad=True) for n, v in params.items()}
            hyper = {k: v for k, v in twin_cls(params, **opts).param_groups[0].items() if k != "params"}
            self.opt = getattr(torch.optim, torch_name)(list(self.t.values()), **hyper, **extra, foreach=False)

        def step(self, g):
            for n, t in self.t.items():
                t.grad = torch.from_numpy(g[n].copy())
            self.opt.step()

    ref, twin = run_pair(TorchOpt, lambda p: twin_cls(p, **opts), pname, pf, gf)
    for n, t in ref.t.items():
        # torch fuses multiply-adds (FMA) where NumPy rounds twice: rtol 1e-5 as test_reference's oracle tests
        a, d = twin.params[n], t.detach().numpy()
        np.testing.assert_array_equal(np.isnan(a), np.isnan(d), err_msg=f"{torch_name} {rname} NaN of {n}")
        fin = np.isfinite(d)
        np.testing.assert_array_equal(a[~fin & ~np.isnan(d)], d[~fin & ~np.isnan(d)])
        np.testing.assert_allclose(a[fin], d[fin], rtol=1e-5, atol=1e-6 + (FTZ_ATOL if tiny else 0), err_msg=n)


def test_rmsprop_centered_huge_grads_leave_params_as_torch_does():
    """torch's fused s - a*a is +inf for s = inf: the step divides by inf and leaves the params unchanged."""
    p = {"w": np.array([0.5, -0.5, 1.0], np.float32)}
    twin = rlx_gpu.reference.RMSprop(p, centered=True)
    twin.step({"w": np.array([1e30, -1e30, 1e30], np.float32)})
    np.testing.assert_array_equal(twin.params["w"], p["w"])


@pytest.mark.gpu
def test_mars_norm_overflows_as_the_authors_code(device):
    """MARS takes |c| in float32 (torch.norm of the grad's dtype): for grads of 1e20 it is inf, c/inf = 0, and the
    first step moves a matrix by its weight decay only, on the GPU and in the twin."""
    p = {"w": np.ones((3, 4), np.float32)}
    g = {"w": np.full((3, 4), 1e20, np.float32)}
    for opt in (rlx_gpu.Mars(p, device=device), rlx_gpu.reference.Mars(p)):
        opt.step(g)
        np.testing.assert_array_equal(opt.read_params()["w"], p["w"])  # wd 0: no move at all


# -- the clip ------------------------------------------------------------------------------------------------------
CLIP_CASES = [
    ("nan", [[1.0, 2.0, np.nan], [3.0, 4.0]]),
    ("inf", [[1.0, -np.inf, 2.0], [3.0, 4.0]]),
    ("overflow 1e20", [[1e20, 1e20, 1e20], [1.0, 2.0]]),
    ("underflow 1e-30", [[1e-30, 2e-30], [-1e-30]]),
    ("1e19 fits", [[1e19, 1e19, 1e19], [0.0]]),
]


def same_float(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b or a == pytest.approx(b, rel=2e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3.0])
@pytest.mark.parametrize("case,values", CLIP_CASES, ids=[c[0] for c in CLIP_CASES])
def test_clip_with_nan_and_overflow_matches_torch(case, values, norm_type, device):
    named = {f"g{i}": np.array(v, np.float32) for i, v in enumerate(values)}
    want_total, want = torch_clip(named, 1.0, norm_type)
    host = {n: g.copy() for n, g in named.items()}
    opt = rlx_gpu.SGD({n: np.zeros_like(g) for n, g in named.items()}, device=device)
    for n, g in named.items():
        opt.grads[n].write(g)
    for who, total, out in (("host", rlx_gpu.clip_grad_norm(host, 1.0, norm_type), host),
                            ("gpu", rlx_gpu.clip_grad_norm(opt, 1.0, norm_type), None)):
        assert same_float(total, want_total), f"{who}: total {total}, torch {want_total}"
        for n in named:
            got = out[n] if out is not None else opt.grads[n].numpy()
            assert_ieee_close(got, want[n], f"{who} clipped grad {n}")


@pytest.mark.gpu
@pytest.mark.parametrize("case,values", CLIP_CASES[:3], ids=[c[0] for c in CLIP_CASES[:3]])
def test_fused_clip_with_nan_and_overflow(case, values, device):
    """clip_grad_norm= in the step: a NaN grad makes every param NaN, as torch's clip + step would; an overflowing
    norm gives a factor of 0. With skip_nonfinite the step is skipped instead."""
    grads = {f"g{i}": np.array(v, np.float32) for i, v in enumerate(values)}
    params = {n: np.ones_like(g) for n, g in grads.items()}
    gpu = rlx_gpu.SGD(params, lr=0.1, clip_grad_norm=1.0, device=device)
    twin = rlx_gpu.reference.SGD(params, lr=0.1, clip_grad_norm=1.0)
    torch = pytest.importorskip("torch", reason="torch is the oracle here")
    tp = [torch.tensor(p, requires_grad=True) for p in params.values()]
    for t, g in zip(tp, grads.values()):
        t.grad = torch.tensor(g)
    want_norm = float(torch.nn.utils.clip_grad_norm_(tp, 1.0, foreach=False))
    torch.optim.SGD(tp, lr=0.1).step()
    gpu.step(grads)
    twin.step(grads)
    assert same_float(gpu.last_grad_norm(), want_norm) and same_float(twin.last_grad_norm(), want_norm)
    for t, n in zip(tp, grads):
        assert_ieee_close(gpu.params[n].numpy(), t.detach().numpy(), f"gpu {case} {n}")
        assert_ieee_close(twin.params[n], t.detach().numpy(), f"twin {case} {n}")
    if case in ("nan", "inf"):
        checked = rlx_gpu.SGD(params, lr=0.1, clip_grad_norm=1.0, skip_nonfinite=True, device=device)
        checked.step(grads)
        assert checked.last_step_skipped and math.isnan(checked.last_grad_norm())
        np.testing.assert_array_equal(checked.params["g1"].numpy(), params["g1"])


@pytest.mark.gpu
@pytest.mark.parametrize("make", ["gpu", "twin"])
def test_last_grad_norm_is_none_when_no_norm_was_computed(make, device, tmp_path):
    p = {"w": np.ones(4, np.float32)}
    g = {"w": np.full(4, 2.0, np.float32)}
    cls = (lambda **k: rlx_gpu.AdamW(p, device=device, **k)) if make == "gpu" \
        else (lambda **k: rlx_gpu.reference.AdamW(p, **k))
    plain, clipped = cls(), cls(clip_grad_norm=1.0)
    assert plain.last_grad_norm() is None and clipped.last_grad_norm() is None  # fresh
    plain.step(g)
    assert plain.last_grad_norm() is None  # clipping off
    clipped.step(g)
    assert clipped.last_grad_norm() == pytest.approx(4.0)
    clipped.clip_grad_norm = None
    clipped.step(g)
    assert clipped.last_grad_norm() is None  # the last step clipped nothing
    clipped.clip_grad_norm = 1.0
    clipped.step(g)
    clipped.save(tmp_path / "c.npz")
    assert type(clipped).load(tmp_path / "c.npz").last_grad_norm() is None  # loaded
