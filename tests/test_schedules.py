"""LR schedules against torch.optim.lr_scheduler, value for value over hundreds of steps; they drive the GPU
optimizers with no recompilation."""
import math

import numpy as np
import pytest

import rlx_gpu
from rlx_gpu import schedules as S

torch = pytest.importorskip("torch", reason="torch's schedulers are the oracle here; pip install rlx_gpu[oracle]")
T = torch.optim.lr_scheduler

CASES = [
    ("LambdaLR", dict(lr_lambda=lambda e: 0.95 ** e + 0.01 * math.sin(e))),
    ("StepLR", dict(step_size=30, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[10, 50, 50, 200], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.99)),
    ("LinearLR", dict(start_factor=0.1, end_factor=1.0, total_iters=40)),
    ("LinearLR", dict(start_factor=1.0, end_factor=0.05, total_iters=250)),
    ("CosineAnnealingLR", dict(T_max=100, eta_min=1e-4)),
    ("OneCycleLR", dict(max_lr=0.1, total_steps=300)),
    ("OneCycleLR", dict(max_lr=[0.1, 0.05], total_steps=300, three_phase=True, anneal_strategy="linear")),
]


def pair(name, kw, cls=rlx_gpu.reference.SGD, groups=2):
    ps = [{"params": {f"w{i}": np.zeros(3, np.float32)}, "lr": 0.1 * (i + 1)} for i in range(groups)]
    ours = cls(ps, momentum=0.9)
    tp = [{"params": [torch.zeros(3, requires_grad=True)], "lr": 0.1 * (i + 1)} for i in range(groups)]
    theirs = torch.optim.SGD(tp, momentum=0.9)
    return getattr(S, name)(ours, **kw), getattr(T, name)(theirs, **kw), ours, theirs


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_matches_torch(name, kw):
    s, t, ours, theirs = pair(name, kw)
    assert s.get_last_lr() == t.get_last_lr()
    for _ in range(299 if name == "OneCycleLR" else 400):
        theirs.step()
        t.step()
        s.step()
        assert s.get_last_lr() == t.get_last_lr()  # the same float64 recurrences: equal, not close
        for g, h in zip(ours.param_groups, theirs.param_groups):
            assert g["lr"] == h["lr"] and g["momentum"] == h["momentum"]


def test_sequential_warmup_cosine_matches_torch():
    ours = rlx_gpu.reference.AdamW({"w": np.zeros(3, np.float32)}, lr=0.01)
    theirs = torch.optim.AdamW([torch.zeros(3, requires_grad=True)], lr=0.01)
    s = S.warmup_cosine(ours, warmup_steps=20, total_steps=300, start_factor=0.01, eta_min=1e-5)
    tw = T.LinearLR(theirs, start_factor=0.01, end_factor=1.0, total_iters=20)
    tc = T.CosineAnnealingLR(theirs, T_max=280, eta_min=1e-5)
    t = T.SequentialLR(theirs, [tw, tc], milestones=[20])
    assert s.get_last_lr() == t.get_last_lr()
    for _ in range(300):
        theirs.step()
        t.step()
        s.step()
        assert s.get_last_lr() == t.get_last_lr()


@pytest.mark.gpu
def test_drives_gpu_optimizer_without_recompiling(device):
    params = {"w": np.ones(1000, np.float32)}
    gpu, twin = rlx_gpu.AdamW(params, lr=0.01, device=device), rlx_gpu.reference.AdamW(params, lr=0.01)
    sg, st = S.OneCycleLR(gpu, max_lr=0.05, total_steps=50), S.OneCycleLR(twin, max_lr=0.05, total_steps=50)
    rng = np.random.default_rng(0)
    for i in range(49):
        g = {"w": rng.standard_normal(1000).astype(np.float32)}
        gpu.step(g)
        twin.step(g)
        sg.step()
        st.step()
        if i == 1:  # (the first steps build their kernels; run alone, this test's device has none before them)
            compiled = len(device._shared["pipelines"])
    assert len(device._shared["pipelines"]) == compiled
    assert sg.get_last_lr() == st.get_last_lr() and gpu.param_groups[0]["betas"] == twin.param_groups[0]["betas"]
    np.testing.assert_allclose(gpu.params["w"].numpy(), twin.params["w"], rtol=2e-5, atol=1e-6)


def test_state_dict_round_trip():
    s, _, ours, _ = pair("CosineAnnealingLR", dict(T_max=50))
    for _ in range(7):
        s.step()
    sd = s.state_dict()
    fresh = rlx_gpu.reference.SGD([{"params": {"a": np.zeros(1, np.float32)}, "lr": 0.1},
                                   {"params": {"b": np.zeros(1, np.float32)}, "lr": 0.2}], momentum=0.9)
    s2 = S.CosineAnnealingLR(fresh, T_max=50)
    s2.load_state_dict(sd)
    for g, h in zip(fresh.param_groups, ours.param_groups):
        g["lr"] = h["lr"]
    for _ in range(20):
        s.step()
        s2.step()
        assert s.get_last_lr() == s2.get_last_lr()


BAD = [
    ("StepLR", dict(step_size=0), ValueError, "StepLR: step_size must be a finite number > 0, got 0"),
    ("StepLR", dict(step_size=-3), ValueError, "StepLR: step_size must be a finite number > 0, got -3"),
    ("StepLR", dict(step_size=5, gamma=float("nan")), ValueError, "StepLR: gamma must be a finite number, got nan"),
    ("MultiStepLR", dict(milestones=[3], gamma="0.1"), ValueError, "MultiStepLR: gamma must be a finite number"),
    ("ExponentialLR", dict(gamma=float("inf")), ValueError, "ExponentialLR: gamma must be a finite number, got inf"),
    ("ExponentialLR", dict(gamma=True), ValueError, "ExponentialLR: gamma must be a finite number, got True"),
    ("CosineAnnealingLR", dict(T_max=0), ValueError, "CosineAnnealingLR: T_max must be a finite number > 0, got 0"),
    ("CosineAnnealingLR", dict(T_max=10, eta_min=None), ValueError, "CosineAnnealingLR: eta_min must be a finite"),
    ("LambdaLR", dict(lr_lambda=3), TypeError, "LambdaLR: lr_lambda must be a function of the epoch"),
    ("LambdaLR", dict(lr_lambda=[lambda e: 1.0, None]), TypeError, "LambdaLR: lr_lambda must be a function"),
    ("warmup_cosine", dict(warmup_steps=-1, total_steps=10), ValueError,
     "warmup_cosine: warmup_steps must be a finite number >= 0, got -1"),
    ("warmup_cosine", dict(warmup_steps=2, total_steps=10, eta_min=float("nan")), ValueError,
     "warmup_cosine: eta_min must be a finite number, got nan"),
]


@pytest.mark.parametrize("name,kw,err,msg", BAD, ids=[f"{n}-{i}" for i, (n, *_) in enumerate(BAD)])
def test_arguments_that_make_no_schedule_raise_before_anything_changes(name, kw, err, msg):
    """torch's schedulers take these and fail at a later step (a ZeroDivisionError from step_size=0 or T_max=0)
    or write NaN lrs; ours raise at construction, naming the argument, with the optimizer's groups untouched
    (no ``initial_lr`` written, no lr changed)."""
    opt = rlx_gpu.reference.SGD([{"params": {f"w{i}": np.zeros(3, np.float32)}, "lr": 0.1 * (i + 1)}
                                 for i in range(2)], momentum=0.9)
    before = [dict(g, params=None) for g in opt.param_groups]
    with pytest.raises(err, match=msg.replace("(", r"\(").replace(")", r"\)")):
        getattr(S, name)(opt, **kw)
    assert [dict(g, params=None) for g in opt.param_groups] == before


def test_real_numbers_torch_takes_make_the_same_schedule():
    """Any real number (a Fraction, NumPy scalars, ints) for gamma / eta_min / T_max, as torch takes them."""
    from fractions import Fraction
    torch = pytest.importorskip("torch")
    for make in (lambda M, o: M.StepLR(o, step_size=3, gamma=Fraction(1, 2)),
                 lambda M, o: M.CosineAnnealingLR(o, T_max=np.int64(7), eta_min=Fraction(1, 1000))):
        opt = rlx_gpu.reference.SGD({"w": np.zeros(3, np.float32)}, lr=0.1)
        t_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        s, ts = make(S, opt), make(torch.optim.lr_scheduler, t_opt)
        for _ in range(12):
            t_opt.step()
            s.step()
            ts.step()
            assert s.get_last_lr() == ts.get_last_lr()
