"""Lion as lion-pytorch (Chen et al.'s reference code, lucidrains/lion-pytorch 0.2.5, installed by CI beside torch):
the twin and the GPU class against ``lion_pytorch.Lion`` over 20 steps, params and ``exp_avg`` within 1e-6
relative plus 1e-7 of the tensor's scale (torch's CPU ``add(alpha=)`` may fuse a multiply-add that NumPy rounds
twice; a sign of a value that close to 0 would flip, and none does here)."""
import numpy as np
import pytest

import rlx_gpu

torch = pytest.importorskip("torch", reason="lion-pytorch runs on torch")
lion_pytorch = pytest.importorskip("lion_pytorch", reason="lion-pytorch is the oracle (CI installs it)")
pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.1, "lr": 1e-3}, {"betas": (0.95, 0.98), "lr": 3e-4}],
                         ids=["defaults", "decay", "betas"])
def test_gpu_and_twin_match_lion_pytorch(kw, device):
    rng = np.random.default_rng(0)
    p0 = {"w": rng.standard_normal((33, 7)).astype(np.float32), "b": rng.standard_normal(9).astype(np.float32)}
    gpu, twin = rlx_gpu.Lion(p0, **kw, device=device), rlx_gpu.reference.Lion(p0, **kw)
    ts = [torch.nn.Parameter(torch.tensor(v)) for v in p0.values()]
    ref = lion_pytorch.Lion(ts, **kw)
    for step in range(20):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        for t, n in zip(ts, p0):
            t.grad = torch.tensor(g[n])
        ref.step()
        gpu.step(g)
        twin.step(g)
        for t, n in zip(ts, p0):
            want = t.detach().numpy()
            tol = dict(rtol=1e-6, atol=1e-7 * max(1.0, float(np.abs(want).max())))
            np.testing.assert_allclose(twin.params[n], want, **tol, err_msg=f"twin {n} {step}")
            np.testing.assert_allclose(gpu.params[n].numpy(), want, **tol, err_msg=f"gpu {n} {step}")
            np.testing.assert_allclose(twin.state[n]["exp_avg"], ref.state[t]["exp_avg"].numpy(), **tol)
