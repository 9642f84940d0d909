"""Bad arguments to the calls around a step (set_lr, save, loss_scale, GradScaler.load_state_dict, read_params,
write_params, add_param_group, DeviceTensor.reshape): a clear error naming what was expected, and nothing changed
(the 2026-12-06 probe's findings; each assertion below failed before its fix)."""
import numpy as np
import pytest

import rlx_gpu
from test_errors import assert_unchanged, snapshot


def _params():
    return {"a": np.linspace(-1, 1, 8, dtype=np.float32), "ab": np.ones(3, np.float32)}


def _grads():
    return {"a": np.full(8, 0.5, np.float32), "ab": np.full(3, -0.25, np.float32)}


BAD_LR = [("x", TypeError, "lr must be a number"), (float("nan"), ValueError, "Invalid learning rate: nan"),
          (-1.0, ValueError, "Invalid learning rate: -1.0"), (None, TypeError, "lr must be a number"),
          (True, TypeError, "lr must be a number"), ([1e-3], TypeError, "lr must be a number"),
          (1e300, ValueError, "within float32's range")]


@pytest.mark.gpu
@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_set_lr_checks_before_any_group_changes(twin, device):
    kw = {} if twin else {"device": device}
    cls = rlx_gpu.reference.AdamW if twin else rlx_gpu.AdamW
    opt = cls([{"params": {"a": _params()["a"]}}, {"params": {"ab": _params()["ab"]}, "lr": 0.5}], **kw)
    for bad, exc, msg in BAD_LR:
        with pytest.raises(exc, match=msg):
            opt.set_lr(bad)
        assert [g["lr"] for g in opt.param_groups] == [1e-3, 0.5]
    opt.set_lr(np.float32(0.25))  # (a good value still lands in every group, and the next step takes it)
    opt.step(_grads())
    ref = rlx_gpu.reference.AdamW(_params(), lr=0.25)
    ref.step(_grads())
    np.testing.assert_allclose(opt.read_params()["a"], ref.read_params()["a"], rtol=1e-6, atol=1e-7)


def test_hyperparameters_past_float32_are_refused():
    for cls in (rlx_gpu.AdamW, rlx_gpu.reference.AdamW, rlx_gpu.SGD):
        with pytest.raises(ValueError, match="lr must be within float32's range"):
            cls(_params(), lr=1e39)
        with pytest.raises(ValueError, match="weight_decay must be within float32's range"):
            cls(_params(), weight_decay=1e39)


@pytest.mark.gpu
def test_save_refuses_groups_load_would_refuse(device, tmp_path):
    path = tmp_path / "c.npz"
    for opt in (rlx_gpu.AdamW(_params(), device=device), rlx_gpu.reference.AdamW(_params())):
        opt.step(_grads())
        opt.save(path)
        first = path.read_bytes()
        for bad in ("x", -5.0):
            opt.param_groups[0]["lr"] = bad
            with pytest.raises((TypeError, ValueError), match="c.npz: not saved .*(lr|learning rate)"):
                opt.save(path)
            assert path.read_bytes() == first
        opt.param_groups[0]["lr"] = 1e-3
        opt.save(path)
        assert type(opt).load(path, **({"device": device} if opt.on_device else {})).param_groups[0]["lr"] == 1e-3


@pytest.mark.gpu
def test_loss_scale_of_the_wrong_kind(device):
    opt = rlx_gpu.AdamW(_params(), device=device)
    opt.step(_grads())
    before = snapshot(opt)
    for bad in (2.0, "x"):
        with pytest.raises(TypeError, match="loss_scale must be a device loss scale"):
            opt.step(_grads(), loss_scale=bad)
        assert_unchanged(before, opt)
    twin = rlx_gpu.reference.AdamW(_params())
    twin.step(_grads())
    p = twin.read_params()
    for bad, exc in ((0.0, ValueError), (float("nan"), ValueError), (-1.0, ValueError), (float("inf"), ValueError),
                     ("x", TypeError)):
        with pytest.raises(exc, match="loss_scale must be"):
            twin.step(_grads(), loss_scale=bad)
        np.testing.assert_array_equal(twin.read_params()["a"], p["a"])
    assert int(twin.state_dict()["state"]["a"]["step"]) == 1
    twin.step({k: g * 4 for k, g in _grads().items()}, loss_scale=4.0)  # (a good scale: the unscaled step)
    assert int(twin.state_dict()["state"]["a"]["step"]) == 2


def test_grad_scaler_load_state_dict_checks_as_the_constructor():
    sc = rlx_gpu.GradScaler(init_scale=1024.0)
    good = sc.state_dict()
    bad = [("scale", float("nan"), "init_scale must be finite"), ("scale", 0.0, "init_scale must be finite"),
           ("scale", -1.0, "init_scale must be finite"), ("growth_interval", 0, "growth_interval must be"),
           ("backoff_factor", 3.0, "backoff factor must be"), ("growth_factor", 1.0, "growth factor must be"),
           ("_growth_tracker", -5, "_growth_tracker must be")]
    for key, value, msg in bad:
        with pytest.raises(ValueError, match=f"GradScaler.load_state_dict: .*{msg}"):
            sc.load_state_dict(dict(good, **{key: value}))
        assert sc.state_dict() == good
    for broken in ({k: v for k, v in good.items() if k != "scale"}, "x"):
        with pytest.raises(ValueError, match="expected a dict with"):
            sc.load_state_dict(broken)
    sc.load_state_dict(dict(good, scale=2.0, _growth_tracker=3))
    assert sc.state_dict()["scale"] == 2.0 and sc.state_dict()["_growth_tracker"] == 3


@pytest.mark.gpu
@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_host_calls_name_what_they_expected(twin, device):
    opt = rlx_gpu.reference.AdamW(_params()) if twin else rlx_gpu.AdamW(_params(), device=device)
    opt.step(_grads())
    with pytest.raises(TypeError, match=r"AdamW.step: grads must be a dict name -> array .* got ndarray"):
        opt.step(np.ones(8, np.float32))
    with pytest.raises(KeyError, match="AdamW.write_params: param for unknown tensor 'zz'"):
        opt.write_params({"zz": np.ones(3, np.float32)})
    with pytest.raises(TypeError, match="write_params: params must be a dict"):
        opt.write_params(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="param_group must be a dict with 'params', got int"):
        opt.add_param_group(5)
    assert list(opt.read_params(names="ab")) == ["ab"]  # (a string is one name, not its letters)
    np.testing.assert_array_equal(opt.read_params(names="ab")["ab"], opt.read_params()["ab"])


@pytest.mark.gpu
def test_device_tensor_reshape_wants_dimensions(device):
    opt = rlx_gpu.AdamW({"y": np.ones(9, np.float32)}, device=device)
    for bad in ((-3, -3), (9.0,), (True, 9), (3, "3")):
        with pytest.raises(ValueError, match=r"cannot view \(9,\) as .*dimensions must be ints >= 0"):
            opt.params["y"].reshape(bad)
    assert opt.params["y"].reshape((3, 3)).shape == (3, 3)
    assert opt.params["y"].reshape(np.int64(9)).shape == (9,)
