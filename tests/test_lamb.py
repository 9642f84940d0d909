"""LAMB as apex's FusedLAMB. There is no apex on PyPI: the oracle is a transcription of apex's kernels
(csrc/multi_tensor_lamb.cu: LAMBStage1Functor, LAMBStage2Functor, multi_tensor_lamb_cuda; the global grad norm of
apex/optimizers/fused_lamb.py's step) into torch float32, line by line. rlx_gpu's GPU class and its twin against it
over 12 steps, per setting: params within 1e-5 relative plus 1e-6 of the tensor's scale (apex divides the grads by
norm / max_grad_norm, rlx_gpu multiplies them by torch's max / (norm + 1e-6): 1e-6 relative apart, then float32
reductions in another order)."""
import numpy as np
import pytest

import rlx_gpu

torch = pytest.importorskip("torch", reason="the apex transcription is written in torch")
pytestmark = pytest.mark.gpu
SHAPES = [(17, 9), (33,), (4, 5, 6)]


def apex_lamb(params, grads, ms, vs, step, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
              bias_correction=True, grad_averaging=True, adam_w_mode=True, max_grad_norm=1.0, use_nvlamb=False):
    """One FusedLAMB.step (float32 tensors, in place), as apex's code computes it."""
    f = torch.float32
    # fused_lamb.py: the global grad norm (multi_tensor_l2norm of the fp32 grads, then of [g_norm_32, g_norm_16])
    global_grad_norm = torch.sqrt(sum((g * g).sum() for g in grads)).to(f)
    beta1, beta2 = betas
    # multi_tensor_lamb_cuda
    bias_correction1 = torch.tensor(1 - beta1 ** step if bias_correction else 1.0, dtype=f)
    bias_correction2 = torch.tensor(1 - beta2 ** step if bias_correction else 1.0, dtype=f)
    beta3 = torch.tensor(1 - beta1 if grad_averaging else 1.0, dtype=f)
    b1, b2, e, decay = (torch.tensor(x, dtype=f) for x in (beta1, beta2, eps, weight_decay))
    param_norms = [torch.sqrt((p * p).sum()) for p in params]  # (per tensor, before stage 1)
    # LAMBStage1Functor: the update written into the grad's place
    mgn = torch.tensor(max_grad_norm, dtype=f)
    clipped = global_grad_norm / mgn if global_grad_norm > mgn else torch.tensor(1.0, dtype=f)
    updates = []
    for p, g, m, v in zip(params, grads, ms, vs):
        r_p = torch.zeros_like(p) if weight_decay == 0 else p
        scaled_grad = g / clipped
        if not adam_w_mode:  # MOMENT_MODE_0: L2 on the scaled grad
            scaled_grad = scaled_grad + decay * r_p
        m.copy_(m * b1 + beta3 * scaled_grad)
        v.copy_(v * b2 + (1 - b2) * scaled_grad * scaled_grad)
        denom = torch.sqrt(v / bias_correction2) + e
        u = (m / bias_correction1) / denom
        updates.append(u if not adam_w_mode else u + decay * r_p)
    # LAMBStage2Functor
    for p, u, pn in zip(params, updates, param_norms):
        un = torch.sqrt((u * u).sum())
        ratio = torch.tensor(lr, dtype=f)
        if use_nvlamb or weight_decay != 0.0:
            ratio = lr * (pn / un) if (un != 0.0 and pn != 0.0) else ratio
        p.copy_(p - ratio * u)


SETTINGS = [{}, {"weight_decay": 0.0}, {"weight_decay": 0.0, "use_nvlamb": True}, {"adam_w_mode": False},
            {"grad_averaging": False, "weight_decay": 0.1}, {"bias_correction": False, "lr": 1e-2},
            {"max_grad_norm": 50.0, "betas": (0.8, 0.99)}]


@pytest.mark.parametrize("kw", SETTINGS, ids=[",".join(f"{k}={v}" for k, v in s.items()) or "defaults"
                                             for s in SETTINGS])
def test_gpu_and_twin_match_apex_fused_lamb(kw, device):
    rng = np.random.default_rng(0)
    p0 = {f"t{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(SHAPES)}
    ours = {k: v for k, v in kw.items() if k != "max_grad_norm"}
    if "max_grad_norm" in kw:
        ours["clip_grad_norm"] = kw["max_grad_norm"]
    gpu, twin = rlx_gpu.LAMB(p0, **ours, device=device), rlx_gpu.reference.LAMB(p0, **ours)
    params = [torch.tensor(v) for v in p0.values()]
    ms, vs = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    for step in range(1, 13):
        g = {n: (rng.standard_normal(v.shape) * (3.0 if step % 3 else 0.05)).astype(np.float32)  # (clipped or not)
             for n, v in p0.items()}
        gpu.step(g)
        twin.step(g)
        apex_lamb(params, [torch.tensor(x) for x in g.values()], ms, vs, step, **kw)
        for i, n in enumerate(p0):
            want = params[i].numpy()
            tol = dict(rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(want).max())))
            np.testing.assert_allclose(twin.params[n], want, **tol, err_msg=f"twin {n} step {step}")
            np.testing.assert_allclose(gpu.params[n].numpy(), want, **tol, err_msg=f"gpu {n} step {step}")
            m = ms[i].numpy()  # (the clip factors 1e-6 relative apart, as the params: 1e-6 of the moment's scale)
            np.testing.assert_allclose(gpu.state_dict()["state"][n]["exp_avg"], m, rtol=1e-5,
                                       atol=1e-6 * max(1.0, float(np.abs(m).max())), err_msg=f"exp_avg {n}")


def test_lamb_defaults_are_apexs():
    """apex's defaults: the clip at max_grad_norm=1.0 (our clip_grad_norm, which LAMB alone defaults to 1.0),
    eps 1e-6, weight_decay 0.01, adam_w_mode, grad_averaging, no nvlamb."""
    opt = rlx_gpu.reference.LAMB({"w": np.ones(3, np.float32)})
    assert opt.clip_grad_norm == 1.0 and rlx_gpu.reference.AdamW({"w": np.ones(3, np.float32)}).clip_grad_norm is None
    assert rlx_gpu.reference.LAMB({"w": np.ones(3, np.float32)}, clip_grad_norm=None).clip_grad_norm is None
    d = rlx_gpu.LAMB.hyperparameters()
    assert (d["eps"], d["weight_decay"], d["adam_w_mode"], d["grad_averaging"], d["use_nvlamb"]) == \
        (1e-6, 0.01, True, True, False)
    assert "clip_grad_norm=1.0" in str(rlx_gpu.LAMB.__signature__)
