"""GPU kernels against their NumPy twins: every optimizer x option set, many sizes, many steps."""
import numpy as np
import pytest

from cases import CASES, ROWS, TABLE, case_id
from helpers import assert_same, make_grads, make_params

pytestmark = pytest.mark.gpu

# Awkward sizes: empty, scalar-like, around vec4 / workgroup / block boundaries, a large odd one.
SIZES = [0, 1, 3, (7, 9), 63, 64, 65, 255, 256, 257, 2047, 2048, 2049, (4, 1, 3), 278011]


@pytest.mark.parametrize("gpu_cls,twin_cls,opts", CASES, ids=case_id)
def test_parity_many_tensors(gpu_cls, twin_cls, opts, device):
    params = make_params(SIZES + [()], seed=1)
    gpu, twin = gpu_cls(params, **opts, device=device), twin_cls(params, **opts)
    rng = np.random.default_rng(2)
    for s in range(12):
        # Some tensors have no grad on some steps: they and their state must not move.
        drop = {n for i, n in enumerate(params) if (i + s) % 5 == 0}
        g = make_grads(params, rng, drop)
        gpu.step(g)
        twin.step(g)
    assert_same(gpu, twin, f"{gpu_cls.__name__} {opts}")


@pytest.mark.parametrize("gpu_cls,twin_cls,group2", ROWS, ids=case_id)
def test_param_groups_and_live_hyperparameters(gpu_cls, twin_cls, group2, device):
    a, b = make_params([100, (3, 33)], seed=3, prefix="a"), make_params([5, 4099], seed=4, prefix="b")
    groups = [{"params": a}, {"params": b, **group2}]
    gpu, twin = gpu_cls(groups, device=device), twin_cls(groups)
    rng = np.random.default_rng(5)
    for s in range(10):
        if s == 4:  # hyperparameter changes take effect at the next step
            for o in (gpu, twin):
                o.param_groups[0]["lr"] *= 0.5
                o.param_groups[1]["weight_decay"] = 0.05
        if s == 7:
            gpu.set_lr(1e-3)
            twin.set_lr(1e-3)
        g = make_grads({**a, **b}, rng)
        gpu.step(g)
        twin.step(g)
    assert_same(gpu, twin, gpu_cls.__name__)


@pytest.mark.parametrize("gpu_cls,twin_cls,opts", [c for c in CASES if c[2] == {}], ids=case_id)
def test_state_dict_round_trip_then_lockstep(gpu_cls, twin_cls, opts, device):
    params = make_params([17, (8, 8), 1000], seed=6)
    rng = np.random.default_rng(7)
    gpu = gpu_cls(params, device=device)
    for s in range(4):
        gpu.step(make_grads(params, rng, drop={"t0"} if s == 1 else ()))
    # GPU -> twin: the twin continues from the GPU's params and state.
    twin = twin_cls({n: gpu.params[n].numpy() for n in params})
    twin.load_state_dict(gpu.state_dict())
    # twin -> a fresh GPU optimizer.
    gpu2 = gpu_cls({n: gpu.params[n].numpy() for n in params}, device=device)
    gpu2.load_state_dict(twin.state_dict())
    assert_same(gpu2, twin, "after load")
    for _ in range(6):
        g = make_grads(params, rng)
        for o in (gpu, gpu2, twin):
            o.step(g)
    assert_same(gpu, twin, "lockstep")
    assert_same(gpu2, twin, "lockstep after reload")


@pytest.mark.parametrize("gpu_cls,twin_cls,opts", [c for c in CASES if c[2] == {}], ids=case_id)
def test_device_grads_and_zero_grad(gpu_cls, twin_cls, opts, device):
    """step() with no argument uses the device grad slots; DeviceTensor grads are copied on the device."""
    params = make_params([10, 300], seed=8)
    gpu, twin = gpu_cls(params, device=device), twin_cls(params)
    rng = np.random.default_rng(9)
    g = make_grads(params, rng)
    for n, v in g.items():
        gpu.grads[n].write(v)
    gpu.step()
    twin.step(g)
    other = gpu_cls(params, device=device)  # grads living in another optimizer's arena
    g2 = make_grads(params, rng)
    for n, v in g2.items():
        other.grads[n].write(v)
    gpu.step({n: other.grads[n] for n in params})
    twin.step(g2)
    assert_same(gpu, twin)
    gpu.zero_grad()
    for n in params:
        assert not gpu.grads[n].numpy().any()


def test_table_covers_every_optimizer():
    import rlx_gpu
    names = {row[0].__name__ for row in TABLE}
    every = {n for n in rlx_gpu.__all__ if isinstance(getattr(rlx_gpu, n), type)
             and issubclass(getattr(rlx_gpu, n), rlx_gpu.Optimizer) and n != "Optimizer"}
    assert names == every - {"SparseAdam", "Muon", "StiefelSGD", "SOAP", "Kron"}  # (sparse grads only: test_sparse.py; 2-D only:
    # test_muon.py; points of the Stiefel manifold only: test_stiefel.py)


def test_sophia_hessian_updates_match(device):
    """Sophia-H's Hessian EMA from update_hessian, interleaved with steps, GPU vs twin."""
    import rlx_gpu
    params = make_params([33, (4, 5), 2049], seed=20)
    gpu, twin = rlx_gpu.SophiaH(params, lr=1e-2, device=device), rlx_gpu.reference.SophiaH(params, lr=1e-2)
    rng = np.random.default_rng(21)
    for s in range(12):
        if s % 3 == 0:
            est = {n: np.abs(rng.standard_normal(p.shape)).astype(np.float32) for n, p in params.items()
                   if not (s == 3 and n == "t0")}
            gpu.update_hessian(est)
            twin.update_hessian(est)
        g = make_grads(params, rng)
        gpu.step(g)
        twin.step(g)
    assert_same(gpu, twin, "SophiaH")
    with pytest.raises(ValueError, match=r"update_hessian: estimate for 't0' has shape \(4,\), expected \(33,\)"):
        gpu.update_hessian({"t0": np.zeros(4, np.float32)})


def test_read_params_and_numpy_into_out(device):
    import rlx_gpu
    params = make_params([(3, 4), 10], seed=30)
    opt = rlx_gpu.Adam(params, device=device)
    out = {n: np.zeros_like(p) for n, p in params.items()}
    got = opt.read_params(out=out)
    assert all(got[n] is out[n] and np.array_equal(out[n], params[n]) for n in params)
    buf = np.zeros((3, 4), np.float32)
    assert opt.params["t0"].numpy(out=buf) is buf and np.array_equal(buf, params["t0"])
    with pytest.raises(ValueError, match=r"'t0': out has shape \(4, 3\), expected \(3, 4\)"):
        opt.params["t0"].numpy(out=np.zeros((4, 3), np.float32))
    with pytest.raises(KeyError, match="unknown tensor 'zz'"):
        opt.read_params(["zz"])


@pytest.mark.parametrize("gpu_cls,twin_cls,opts", [c for c in CASES if c[2] == {}], ids=case_id)
def test_lr_scale_per_tensor(gpu_cls, twin_cls, opts, device):
    """lr_scale multiplies the group lr per tensor inside the kernel's scalars; 0 freezes a tensor's params."""
    params = make_params([(6, 5), 300, 7], seed=40)
    scale = {"t0": 0.0, "t1": 3.0}
    gpu, twin = gpu_cls(params, lr_scale=scale, device=device), twin_cls(params, lr_scale=scale)
    by_fn = gpu_cls(params, lr_scale=lambda n: scale.get(n, 1.0), device=device)
    rng = np.random.default_rng(41)
    for _ in range(6):
        g = make_grads(params, rng)
        for o in (gpu, twin, by_fn):
            o.step(g)
    assert_same(gpu, twin, "lr_scale")
    assert_same(by_fn, twin, "lr_scale callable")
    if gpu_cls.__name__ not in ("Adafactor", "LAMB", "NAdamW", "AdamW", "Lion", "SophiaH", "Mars"):
        np.testing.assert_array_equal(gpu.params["t0"].numpy(), params["t0"])  # no decoupled decay: frozen


def test_lr_scale_errors():
    import rlx_gpu
    p = {"w": np.zeros(3, np.float32)}
    for cls in (rlx_gpu.SGD, rlx_gpu.reference.SGD):
        with pytest.raises(KeyError, match=r"lr_scale names unknown tensor\(s\) \['v'\]"):
            cls(p, lr_scale={"v": 2.0})
        with pytest.raises(ValueError, match="lr_scale for 'w' must be a finite number >= 0, got -1.0"):
            cls(p, lr_scale={"w": -1.0})
        with pytest.raises(TypeError, match="lr_scale must be a dict"):
            cls(p, lr_scale=[1.0])
