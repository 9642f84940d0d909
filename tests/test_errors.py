"""Bad input: a clear error that names the tensor or argument, and nothing changed afterwards."""
import numpy as np
import pytest

import rlx_gpu
from cases import ROWS, case_id
from optimizer_db import DB
from helpers import assert_same, make_grads, make_params

BAD_HYPER = [(r.gpu, kw, msg) for r in DB for kw, msg in r.bad_hyper]  # (tests/optimizer_db.py)


@pytest.mark.parametrize("cls,kw,msg", BAD_HYPER, ids=lambda v: case_id(v) if not isinstance(v, str) else v)
def test_bad_hyperparameters_torch_wording(cls, kw, msg):
    twin = getattr(rlx_gpu.reference, cls.__name__)
    for c in (cls, twin):  # raised before any device work, by the GPU class and the twin alike
        with pytest.raises(ValueError) as e:
            c({"w": np.zeros(3, np.float32)}, **kw)
        assert str(e.value) == msg


@pytest.mark.parametrize("gpu_cls,twin_cls,group2", ROWS, ids=case_id)
def test_bad_params(gpu_cls, twin_cls, group2):
    for c in (gpu_cls, twin_cls):
        with pytest.raises(ValueError, match="empty parameter list"):
            c({})
        with pytest.raises(TypeError, match="'w' has dtype float64, expected float32"):
            c({"w": np.zeros(3)})
        with pytest.raises(TypeError, match="'w' must be a numpy float32 array"):
            c({"w": [1.0, 2.0]})
        with pytest.raises(ValueError, match="'w' appears more than once"):
            c([{"params": {"w": np.zeros(3, np.float32)}}, {"params": {"w": np.zeros(3, np.float32)}}])
        with pytest.raises(ValueError, match="unknown option"):
            c([{"params": {"w": np.zeros(3, np.float32)}, "learning_rate": 0.1}])


def snapshot(opt):
    sd = opt.state_dict()
    return ({n: p.numpy() for n, p in opt.params.items()}, sd)


def assert_unchanged(before, opt):
    params, sd = before
    for n, p in params.items():
        np.testing.assert_array_equal(opt.params[n].numpy(), p)
    now = opt.state_dict()
    assert now["state"].keys() == sd["state"].keys()
    for n, st in sd["state"].items():
        assert now["state"][n]["step"] == st["step"]
        for k, v in st.items():
            if k != "step":
                np.testing.assert_array_equal(now["state"][n][k], v)
    assert now["param_groups"] == sd["param_groups"]


@pytest.mark.gpu
@pytest.mark.parametrize("gpu_cls,twin_cls,group2", ROWS, ids=case_id)
def test_bad_grads_change_nothing(gpu_cls, twin_cls, group2, device):
    params = make_params([(3, 4), 5], seed=0)
    opt = gpu_cls(params, device=device)
    rng = np.random.default_rng(0)
    opt.step(make_grads(params, rng))
    before = snapshot(opt)
    good = make_grads(params, rng)
    cases = [
        (dict(good, t0=np.zeros((4, 3), np.float32)), ValueError, r"'t0' has shape \(4, 3\), expected \(3, 4\)"),
        (dict(good, t1=np.zeros(5, np.float64)), TypeError, "'t1' has dtype float64, expected float32"),
        (dict(good, nope=np.zeros(5, np.float32)), KeyError, "unknown tensor 'nope'"),
        (dict(good, t1=[0.0] * 5), TypeError, "'t1' must be a float32 numpy array"),
        ([good["t0"]], TypeError, "grads must be a dict"),
    ]
    for grads, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            opt.step(grads)
        assert_unchanged(before, opt)
    # A bad hyperparameter set between steps is caught at the next step, before any change.
    lr = opt.param_groups[0]["lr"]
    opt.param_groups[0]["lr"] = -0.5
    with pytest.raises(ValueError, match="Invalid learning rate: -0.5"):
        opt.step(good)
    opt.param_groups[0]["lr"] = lr
    assert_unchanged(before, opt)


@pytest.mark.gpu
def test_bad_state_dict_changes_nothing(device):
    params = make_params([(3, 4), 5], seed=0)
    opt = rlx_gpu.Adam(params, device=device)
    opt.step(make_grads(params, np.random.default_rng(0)))
    before = snapshot(opt)
    sd = opt.state_dict()
    bad = [
        ({"state": {}}, ValueError, "'state' and 'param_groups'"),
        (dict(sd, param_groups=sd["param_groups"] * 2), ValueError, "2 param groups"),
        ({"state": {"zz": {"step": 1}}, "param_groups": sd["param_groups"]}, ValueError, "unknown tensor 'zz'"),
        ({"state": {"t1": {"step": 1, "exp_avg": np.zeros(4, np.float32)}}, "param_groups": sd["param_groups"]},
         ValueError, r"exp_avg of 't1' has shape \(4,\), expected \(5,\)"),
        ({"state": {"t1": {"step": 1, "momentum": np.zeros(5, np.float32)}}, "param_groups": sd["param_groups"]},
         ValueError, "unknown state 'momentum'"),
        ({"state": {"t1": {"step": -2}}, "param_groups": sd["param_groups"]}, ValueError, "'step' of 't1'"),
        ({"state": {}, "param_groups": [dict(sd["param_groups"][0], lr=-1.0)]}, ValueError, "Invalid learning rate"),
    ]
    for sdx, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            opt.load_state_dict(sdx)
        assert_unchanged(before, opt)


@pytest.mark.gpu
def test_device_tensor_write_errors(device):
    opt = rlx_gpu.SGD({"w": np.zeros((2, 3), np.float32)}, device=device)
    with pytest.raises(ValueError, match=r"'w': expected shape \(2, 3\), got \(3, 2\)"):
        opt.grads["w"].write(np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="'w': expected a float32 array, got float64"):
        opt.params["w"].write(np.zeros((2, 3)))
    assert not opt.params["w"].numpy().any()


def test_table_rows_have_bad_input_coverage():
    assert all(r.bad_hyper for r in DB), [r.name for r in DB if not r.bad_hyper]


@pytest.mark.gpu
def test_grads_from_other_slots_of_the_same_optimizer(device):
    """A DeviceTensor grad that is another slot of the same grads arena (even the same chunk buffer) is read as it
    was before the call, also when slots are swapped or a host grad overwrites the source slot."""
    params = make_params([7, 7, 7], seed=3)
    gpu, twin = rlx_gpu.SGD(params, lr=0.1, device=device), rlx_gpu.reference.SGD(params, lr=0.1)
    rng = np.random.default_rng(4)
    g = make_grads(params, rng)
    for n, v in g.items():
        gpu.grads[n].write(v)
    new_t2 = rng.standard_normal(7).astype(np.float32)
    gpu.step({"t0": gpu.grads["t1"], "t1": gpu.grads["t0"], "t2": new_t2})  # a swap, and t2 from the host
    twin.step({"t0": g["t1"], "t1": g["t0"], "t2": new_t2})
    gpu.step({"t1": gpu.grads["t2"], "t2": np.zeros(7, np.float32)})  # t2's slot is overwritten by this call
    twin.step({"t1": new_t2, "t2": np.zeros(7, np.float32)})
    assert_same(gpu, twin, "grads from other slots")


@pytest.mark.gpu
def test_failed_step_keeps_the_scalers_pending_update(device, monkeypatch):
    opt = rlx_gpu.SGD({"w": np.ones(5, np.float32)}, device=device)
    scaler = rlx_gpu.GradScaler(init_scale=1024.0)
    scaler.step(opt, {"w": np.full(5, np.inf, np.float32)})  # skipped: the next update() backs off
    scaler.update()
    real = device.submit

    def broken(enc):
        raise RuntimeError("simulated submit failure")

    monkeypatch.setattr(type(device), "submit", lambda self, enc: broken(enc))
    with pytest.raises(RuntimeError, match="simulated submit failure"):
        scaler.step(opt, {"w": np.ones(5, np.float32)})
    monkeypatch.setattr(type(device), "submit", lambda self, enc: real(enc))
    assert scaler.get_scale() == 512.0  # the pending update() ran after all
    np.testing.assert_array_equal(opt.params["w"].numpy(), np.ones(5, np.float32))
    assert opt.state_dict()["state"] == {} or opt.state_dict()["state"]["w"]["step"] == 0
