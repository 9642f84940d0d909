"""The NumPy twins checked by hand (one or two steps, values worked out in float64 below) and against
torch.optim over many steps where torch is installed."""
import math

import numpy as np
import pytest

from rlx_gpu import reference as R

P0, G1, G2 = 1.0, 0.5, -0.25


def run(cls, steps=(G1,), p=P0, **kw):
    o = cls({"w": np.array([p], np.float32)}, **kw)
    for g in steps:
        o.step({"w": np.array([g], np.float32)})
    return float(o.params["w"][0]), o.state_dict()["state"]["w"]


def close(a, b):
    assert a == pytest.approx(b, rel=2e-6, abs=1e-7)


def test_adam_two_steps():
    lr, b1, b2, eps = 0.1, 0.9, 0.999, 1e-8
    m1, v1 = 0.1 * G1, 0.001 * G1 ** 2
    p1 = P0 - lr * (m1 / (1 - b1)) / (math.sqrt(v1 / (1 - b2)) + eps)  # = 1 - 0.1 * sign(g) at step 1
    m2, v2 = b1 * m1 + 0.1 * G2, b2 * v1 + 0.001 * G2 ** 2
    p2 = p1 - lr * (m2 / (1 - b1 ** 2)) / (math.sqrt(v2 / (1 - b2 ** 2)) + eps)
    p, st = run(R.Adam, (G1, G2), lr=lr)
    close(p, p2)
    close(st["exp_avg"][0], m2)
    close(st["exp_avg_sq"][0], v2)
    assert st["step"] == 2


def test_adam_l2_vs_adamw_decoupled():
    lr, wd = 0.1, 0.5
    g = G1 + wd * P0  # Adam: L2 added to the grad; first step moves by lr*sign(g)
    close(run(R.Adam, lr=lr, weight_decay=wd)[0], P0 - lr * g / (abs(g) + 1e-8 * 1))
    close(run(R.AdamW, lr=lr, weight_decay=wd)[0], P0 * (1 - lr * wd) - lr * 1.0)


def test_adam_amsgrad_keeps_max():
    _, st = run(R.Adam, (1.0, 0.0), amsgrad=True)
    close(st["max_exp_avg_sq"][0], 0.001)
    close(st["exp_avg_sq"][0], 0.001 * 0.999)


def test_sgd_momentum_seeds_then_accumulates():
    lr, mu, d = 0.1, 0.9, 0.2
    b1 = G1
    b2 = mu * b1 + (1 - d) * G2
    p, st = run(R.SGD, (G1, G2), lr=lr, momentum=mu, dampening=d)
    close(p, P0 - lr * b1 - lr * b2)
    close(st["momentum_buffer"][0], b2)
    p, _ = run(R.SGD, (G1, G2), lr=lr, momentum=mu, nesterov=True)
    b2 = mu * G1 + G2
    close(p, P0 - lr * (G1 + mu * G1) - lr * (G2 + mu * b2))
    assert run(R.SGD, lr=lr, maximize=True)[0] == pytest.approx(P0 + lr * G1)


def test_rmsprop_centered_momentum():
    lr, a, eps, mu = 0.01, 0.9, 1e-8, 0.5
    s = (1 - a) * G1 ** 2
    ga = (1 - a) * G1
    d = math.sqrt(s - ga * ga) + eps
    b = G1 / d
    p, st = run(R.RMSprop, lr=lr, alpha=a, centered=True, momentum=mu)
    close(p, P0 - lr * b)
    close(st["grad_avg"][0], ga)
    close(st["square_avg"][0], s)
    p, _ = run(R.RMSprop, lr=lr, alpha=a)
    close(p, P0 - lr * G1 / (math.sqrt(s) + eps))


def test_adagrad_lr_decay_and_initial_accumulator():
    lr, dec, init, eps = 0.1, 0.5, 0.3, 1e-10
    s1 = init + G1 ** 2
    p1 = P0 - lr * G1 / (math.sqrt(s1) + eps)
    s2 = s1 + G2 ** 2
    p2 = p1 - lr / (1 + dec) * G2 / (math.sqrt(s2) + eps)
    p, st = run(R.Adagrad, (G1, G2), lr=lr, lr_decay=dec, initial_accumulator_value=init)
    close(p, p2)
    close(st["sum"][0], s2)


def test_lamb_trust_ratio():
    o = R.LAMB({"w": np.array([3.0, 4.0], np.float32)}, lr=0.1, weight_decay=0.1)
    g = np.array([1.0, -2.0], np.float32)
    o.step({"w": g})
    p = np.array([3.0, 4.0])
    u = np.sign(g) / (1 + 1e-6) + 0.1 * p  # step 1: m^/sqrt(v^) = sign(g)
    r = np.linalg.norm(p) / np.linalg.norm(u)
    np.testing.assert_allclose(o.params["w"], p - 0.1 * r * u, rtol=2e-6)


def test_lamb_ratio_is_one_for_zero_param():
    o = R.LAMB({"w": np.zeros(3, np.float32)}, lr=0.1, weight_decay=0.0)
    o.step({"w": np.array([1.0, -1.0, 0.0], np.float32)})
    np.testing.assert_allclose(o.params["w"], [-0.1 / (1 + 1e-6), 0.1 / (1 + 1e-6), 0.0], rtol=1e-6)


# -- torch.optim as the oracle ---------------------------------------------------------------------
ORACLE = [
    (R.Adam, "Adam", [{}, {"weight_decay": 0.1}, {"amsgrad": True, "maximize": True}]),
    (R.AdamW, "AdamW", [{}, {"amsgrad": True}, {"maximize": True, "weight_decay": 0.3}]),
    (R.SGD, "SGD", [{}, {"momentum": 0.9}, {"momentum": 0.9, "dampening": 0.3, "weight_decay": 0.1},
                    {"momentum": 0.9, "nesterov": True, "maximize": True}]),
    (R.RMSprop, "RMSprop", [{}, {"centered": True}, {"momentum": 0.9, "weight_decay": 0.1},
                            {"centered": True, "momentum": 0.5, "maximize": True, "alpha": 0.3}]),
    (R.Adagrad, "Adagrad", [{}, {"lr_decay": 0.1, "initial_accumulator_value": 0.5},
                            {"weight_decay": 0.1, "maximize": True}]),
    (R.NAdamW, "NAdam", [{}, {"weight_decay": 0.0, "momentum_decay": 0.1}, {"maximize": True, "lr": 1e-2}]),
    (R.RAdam, "RAdam", [{}, {"weight_decay": 0.1}, {"weight_decay": 0.1, "decoupled_weight_decay": True},
                        {"maximize": True, "betas": (0.9, 0.9)}]),
    (R.Adafactor, "Adafactor", [{}, {"weight_decay": 0.1, "lr": 0.05}, {"maximize": True, "d": 1.5},
                                {"eps": (1e-20, 1e-2), "beta2_decay": -0.5}]),
    # rlx_gpu.Adafactor.CSCALE's spec: v^ = R (C / mean) rounds otherwise than torch's (R C) / mean, within the bound
    (R.adafactor.AdafactorCScale, "Adafactor", [{}, {"weight_decay": 0.1, "lr": 0.05}, {"maximize": True, "d": 1.5},
                                                {"eps": (1e-20, 1e-2), "beta2_decay": -0.5}]),
    # rlx_gpu.Adafactor.RSQRT's spec: min(rsq(R) rsq(CN), 1/eps1) for rsqrt(max(R CN, eps1^2)), within the bound
    (R.adafactor.AdafactorRsqrt, "Adafactor", [{}, {"weight_decay": 0.1, "lr": 0.05}, {"maximize": True, "d": 1.5},
                                               {"eps": (1e-20, 1e-2), "beta2_decay": -0.5}]),
]
# Extra torch arguments where our class fixes a choice torch leaves open.
TORCH_EXTRA = {"NAdam": {"decoupled_weight_decay": True}}


@pytest.mark.parametrize("twin_cls,torch_name,opts",
                         [(c, n, o) for c, n, sets in ORACLE for o in sets],
                         ids=lambda v: v if isinstance(v, str) else (",".join(f"{k}={x}" for k, x in v.items()) or "defaults") if isinstance(v, dict) else v.__name__)
def test_twin_matches_torch(twin_cls, torch_name, opts):
    torch = pytest.importorskip("torch", reason="torch is the oracle here; pip install rlx_gpu[oracle]")
    rng = np.random.default_rng(0)
    shapes = {"a": (5, 7), "b": (33,), "c": ()}
    init = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    twin = twin_cls(init, **opts)
    tp = {n: torch.tensor(v, requires_grad=True) for n, v in init.items()}
    hyper = {k: v for k, v in twin.param_groups[0].items() if k != "params"}
    topt = getattr(torch.optim, torch_name)(list(tp.values()), **hyper, **TORCH_EXTRA.get(torch_name, {}),
                                            foreach=False)
    for s in range(20):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in init.items()}
        if s % 4 == 3:
            del g["b"]
        for n, t in tp.items():
            t.grad = torch.from_numpy(g[n]) if n in g else None
        topt.step()
        twin.step(g)
    # Same float32 operations in the same order as torch's single-tensor path. torch's vectorised CPU
    # kernels fuse a*b + c into an FMA where NumPy rounds twice, so elements differ by a few ULP, which
    # compound over the 20 steps: rtol 1e-5, atol 1e-6.
    for n, t in tp.items():
        np.testing.assert_allclose(twin.params[n], t.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
        tstate = topt.state[t]
        for k, v in twin.state_dict()["state"][n].items():
            if k == "step":  # torch's SGD keeps no step count
                assert "step" not in tstate or v == int(tstate["step"]), n
            else:
                np.testing.assert_allclose(v, tstate[k].numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{k} of {n}")


# -- float64 formulas as the oracle where no importable library has the algorithm ----------------------
def qhadamw64(p, grads, lr=1e-3, betas=(0.9, 0.999), nus=(1.0, 1.0), eps=1e-8, weight_decay=0.0):
    m, v, w1, w2 = np.zeros_like(p), np.zeros_like(p), 0.0, 0.0
    for g in grads:
        p = p * (1 - lr * weight_decay)
        w1, w2 = 1 + betas[0] * w1, 1 + betas[1] * w2
        b1, b2 = 1 - 1 / w1, 1 - 1 / w2
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (nus[0] * m + (1 - nus[0]) * g) / (np.sqrt(nus[1] * v + (1 - nus[1]) * g * g) + eps)
    return p


def lion64(p, grads, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
    m = np.zeros_like(p)
    for g in grads:
        p = p * (1 - lr * weight_decay) - lr * np.sign(betas[0] * m + (1 - betas[0]) * g)
        m = betas[1] * m + (1 - betas[1]) * g
    return p


def sophia64(p, grads, hess, lr=1e-4, betas=(0.965, 0.99), rho=0.04, eps=1e-15, weight_decay=0.1):
    m, h = np.zeros_like(p), np.zeros_like(p)
    for i, g in enumerate(grads):
        if i in hess:
            h = betas[1] * h + (1 - betas[1]) * hess[i]
        m = betas[0] * m + (1 - betas[0]) * g
        p = p * (1 - lr * weight_decay) - lr * np.sign(m) * np.minimum(np.abs(m) / np.maximum(rho * h, eps), 1)
    return p


def mars64(p, grads, lr=3e-3, betas=(0.95, 0.99), eps=1e-8, weight_decay=0.0, gamma=0.025, lr_1d=3e-3,
           betas_1d=(0.9, 0.95), weight_decay_1d=0.1):
    m, v, last = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        if p.ndim == 2:
            b1, b2 = betas
            c = g + gamma * b1 / (1 - b1) * (g - last)
            n = np.linalg.norm(c)
            c = c / n if n > 1 else c
            m = b1 * m + (1 - b1) * c
            v = b2 * v + (1 - b2) * c * c
            p = p - lr * (weight_decay * p + m / ((np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps) * (1 - b1 ** t)))
        else:
            b1, b2 = betas_1d
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            p = p * (1 - lr_1d * weight_decay_1d)
            p = p - lr_1d / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
        last = g
    return p


FORMULAS = [
    (R.QHAdamW, qhadamw64, [{}, {"nus": (0.7, 1.0), "betas": (0.995, 0.999), "lr": 1e-2},
                            {"nus": (0.5, 0.8), "weight_decay": 0.1}]),
    (R.Lion, lion64, [{}, {"lr": 1e-3, "weight_decay": 0.5, "betas": (0.95, 0.98)}]),
    (R.Mars, mars64, [{}, {"weight_decay": 0.1, "gamma": 0.1}]),
]


@pytest.mark.parametrize("twin_cls,formula,opts", [(c, f, o) for c, f, sets in FORMULAS for o in sets],
                         ids=lambda v: v.__name__ if callable(v) else str(v))
@pytest.mark.parametrize("shape", [(200,), (10, 20)])
def test_twin_matches_float64_formula(twin_cls, formula, opts, shape):
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(shape).astype(np.float32)
    grads = [rng.standard_normal(shape).astype(np.float32) * (0.01 if len(shape) == 2 else 1) for _ in range(15)]
    twin = twin_cls({"w": p0}, **opts)
    for g in grads:
        twin.step({"w": g})
    want = formula(p0.astype(np.float64), [g.astype(np.float64) for g in grads], **opts)
    # float32 twin against the float64 formula, 15 steps: a few float32 roundings per step.
    np.testing.assert_allclose(twin.params["w"], want, rtol=1e-5, atol=1e-6)


def test_sophia_twin_matches_float64_formula():
    rng = np.random.default_rng(4)
    p0 = rng.standard_normal(200).astype(np.float32)
    grads = [rng.standard_normal(200).astype(np.float32) for _ in range(15)]
    hess = {i: np.abs(rng.standard_normal(200)).astype(np.float32) for i in (0, 5, 10)}
    opts = {"lr": 1e-2, "rho": 0.05}
    twin = R.SophiaH({"w": p0}, **opts)
    for i, g in enumerate(grads):
        if i in hess:
            twin.update_hessian({"w": hess[i]})
        twin.step({"w": g})
    want = sophia64(p0.astype(np.float64), [g.astype(np.float64) for g in grads],
                    {i: h.astype(np.float64) for i, h in hess.items()}, **opts)
    np.testing.assert_allclose(twin.params["w"], want, rtol=1e-5, atol=1e-6)


def test_qhadamw_with_unit_nus_is_adamw():
    rng = np.random.default_rng(5)
    p0 = rng.standard_normal(50).astype(np.float32)
    a, q = R.AdamW({"w": p0}, weight_decay=0.1, eps=1e-8), R.QHAdamW({"w": p0}, weight_decay=0.1)
    for _ in range(10):
        g = rng.standard_normal(50).astype(np.float32)
        a.step({"w": g})
        q.step({"w": g})
    np.testing.assert_allclose(q.params["w"], a.params["w"], rtol=1e-5, atol=1e-6)


# -- bfloat16 parameters against torch on the CPU ----------------------------------------------------------------
def bf16_ulps(a, b) -> float:
    """|a - b| in units of bfloat16's spacing at b; values below 1% of the tensor's largest count at that floor
    (elements that are sums of larger terms lose their relative precision near zero)."""
    a, b = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    mag = np.maximum(np.abs(b), 1e-2 * np.abs(b).max(initial=1e-30))
    return float((np.abs(a - b) / 2.0 ** (np.floor(np.log2(mag)) - 7)).max(initial=0.0))


# (twin, torch class, options, torch implementation, bfloat16 ULPs allowed for params, for states). torch's fused CPU
# kernels compute in float32 and round at the store, as ours; its single-tensor path rounds every operation to
# bfloat16 (torch 2.13's fused CPU SGD is not used: on tensors of 32 elements or more its bfloat16 results differ
# from its own single-tensor path by hundreds of ULPs).
BF16_ORACLE = [
    (R.Adam, "Adam", {}, {"fused": True}, 1, 1),
    (R.Adam, "Adam", {"weight_decay": 0.1, "amsgrad": True, "maximize": True}, {"fused": True}, 1, 1),
    (R.AdamW, "AdamW", {"weight_decay": 0.3}, {"fused": True}, 1, 1),
    (R.Adagrad, "Adagrad", {"weight_decay": 0.1, "lr_decay": 0.01}, {"fused": True}, 2, 2),
    (R.SGD, "SGD", {}, {"foreach": False}, 2, 0),
    (R.SGD, "SGD", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, {"foreach": False}, 2, 32),
    (R.RMSprop, "RMSprop", {}, {"foreach": False}, 16, 8),
    (R.RMSprop, "RMSprop", {"centered": True, "momentum": 0.5}, {"foreach": False}, 16, 8),
]


@pytest.mark.parametrize("twin_cls,torch_name,opts,impl,p_ulps,s_ulps", BF16_ORACLE,
                         ids=[f"{t}-{','.join(o) or 'defaults'}-{next(iter(i))}" for _, t, o, i, _, _ in BF16_ORACLE])
def test_bfloat16_twin_matches_torch(twin_cls, torch_name, opts, impl, p_ulps, s_ulps):
    torch = pytest.importorskip("torch", reason="torch is the oracle here")
    from ml_dtypes import bfloat16
    rng = np.random.default_rng(0)
    init = {n: rng.standard_normal(s).astype(np.float32).astype(bfloat16) for n, s in {"a": (5, 7), "b": (33,)}.items()}
    twin = twin_cls(init, **opts, state_dtype="bfloat16")  # torch keeps a bfloat16 param's state in bfloat16
    tp = {n: torch.tensor(v.astype(np.float32)).to(torch.bfloat16).requires_grad_(True) for n, v in init.items()}
    hyper = {k: v for k, v in twin.param_groups[0].items() if k != "params"}
    topt = getattr(torch.optim, torch_name)(list(tp.values()), **hyper, **impl)
    for _ in range(25):
        g = {n: rng.standard_normal(v.shape).astype(np.float32).astype(bfloat16) for n, v in init.items()}
        for n, t in tp.items():
            t.grad = torch.tensor(g[n].astype(np.float32)).to(torch.bfloat16)
        topt.step()
        twin.step(g)
    for n, t in tp.items():
        assert twin.params[n].dtype == bfloat16
        assert bf16_ulps(twin.params[n], t.detach().float().numpy()) <= p_ulps, n
        for k, v in twin.state_dict()["state"][n].items():
            if k != "step":
                assert bf16_ulps(v, topt.state[t][k].float().numpy()) <= s_ulps, f"{k} of {n}"
