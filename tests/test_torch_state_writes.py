"""The torch drop-in's ``opt.state[p]`` dict as torch users change it, and AdamW's ``decoupled_weight_decay`` key
(the 2026-12-06 probe's findings: a write into the dict read was dropped silently; torch.optim.Adam loading
AdamW's state dict fell back to L2 decay). Exact comparisons: the values are copied, not computed."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is what these tests drive")
import rlx_gpu  # noqa: E402  (after torch: docs/guides/pytorch.md, "Import order")

pytestmark = pytest.mark.gpu


def _stepped(cls=rlx_gpu.AdamW, **kw):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = cls(model.parameters(), lr=1e-2, **kw)
    model(torch.randn(5, 4)).square().sum().backward()
    opt.step()
    return model, opt


def test_writes_into_the_state_dict_read_reach_the_device():
    model, opt = _stepped()
    w = model.weight
    st = opt.state[w]
    st["exp_avg"] = torch.full_like(w, 0.25)
    assert torch.equal(opt.state[w]["exp_avg"], torch.full_like(w, 0.25))
    st.update({"exp_avg_sq": torch.full_like(w, 4.0)})
    assert torch.equal(opt.state[w]["exp_avg_sq"], torch.full_like(w, 4.0))
    assert opt.state[w].setdefault("exp_avg", None) is not None
    st |= {"exp_avg": torch.full_like(w, 0.5)}
    assert torch.equal(opt.state[w]["exp_avg"], torch.full_like(w, 0.5))
    # (the device holds it: the NumPy format reads it back, the weight being tensor "0" as torch numbers it)
    assert np.array_equal(opt.numpy_state_dict()["state"]["0"]["exp_avg"], np.full((3, 4), 0.5, np.float32))


def test_a_key_that_is_not_state_is_refused_and_nothing_changes():
    model, opt = _stepped()
    w = model.weight
    before = {k: v.clone() if torch.is_tensor(v) else v for k, v in opt.state[w].items()}
    st = opt.state[w]
    with pytest.raises(ValueError, match="unknown state 'ema'"):
        st["ema"] = torch.zeros(3)
    assert "ema" not in st and "ema" not in opt.state[w]  # (the dict read is put back too)
    with pytest.raises(ValueError, match="unknown state 'custom'"):
        opt.state[w].update(custom=1)
    after = opt.state[w]
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], v) if torch.is_tensor(v) else after[k] == v for k, v in before.items())
    assert type(copy.deepcopy(after)) is dict


def test_adamw_groups_hold_decoupled_weight_decay_as_torchs():
    model, opt = _stepped(weight_decay=0.1)
    assert opt.param_groups[0]["decoupled_weight_decay"] is True
    sd = opt.state_dict()
    assert sd["param_groups"][0]["decoupled_weight_decay"] is True
    twin_model = copy.deepcopy(model)
    adam = torch.optim.Adam(twin_model.parameters(), lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True)
    adam.load_state_dict(sd)
    assert adam.param_groups[0]["decoupled_weight_decay"] is True  # (False without the key: L2 decay)
    plain = torch.optim.Adam(copy.deepcopy(model).parameters(), lr=1e-2)  # (torch's Adam: decoupled False)
    model(torch.randn(2, 4)).sum().backward()
    plain_model = list(plain.param_groups[0]["params"])
    for p, q in zip(plain_model, model.parameters()):
        p.grad = q.grad.clone()
    plain.step()
    opt.load_state_dict(plain.state_dict())  # (torch's AdamW takes it and stays AdamW: so do we)
    assert opt.param_groups[0]["decoupled_weight_decay"] is True
    opt.step()
