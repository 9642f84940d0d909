"""Every example runs and reaches its goal."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx_gpu

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
# further arguments of the reduced run (the QAT example: one seed, with its looser bounds; the full run is
# BENCHMARKS.md's)
REDUCED = {"train_qat_mlp.py": ["--seeds", "1"]}


@pytest.mark.gpu
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path, tmp_path):
    r = subprocess.run([sys.executable, str(path), "--steps", "150", *REDUCED.get(path.name, [])],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "adapter:" in r.stdout and "final loss" in r.stdout


def test_contributing_diff_is_the_code():
    """CONTRIBUTING.md's "Adding an optimizer" shows the real change that adds Lion, four files (the declaration, the
    WGSL update function, the twin, the test row): its new files are the files here, line for line, and every line
    it adds elsewhere is in the file it names."""
    import re
    root = Path(__file__).resolve().parent.parent
    text = (root / "CONTRIBUTING.md").read_text()
    diff = text.split("```diff\n", 1)[1].split("\n```", 1)[0]
    files = re.split(r"^diff --git a/\S+ b/", diff, flags=re.M)[1:]
    names = sorted(part.split("\n", 1)[0].strip() for part in files)
    assert names == ["rlx_gpu/optim/lion.py", "rlx_gpu/reference/lion.py", "shaders/lion.wgsl",
                     "tests/optimizer_db.py"], names
    for part in files:
        name = part.split("\n", 1)[0].strip()
        added = [ln[1:] for ln in part.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        current = (root / name).read_text().splitlines()
        if "new file mode" in part.split("@@", 1)[0]:
            assert added == current, f"CONTRIBUTING.md's {name} is not the file in the repository"
        else:
            missing = [ln for ln in added if ln not in current]
            assert not missing, f"CONTRIBUTING.md adds lines to {name} that it does not hold: {missing}"


def _example(name):
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "examples" / f"{name}.py"
    if str(path.parent) not in sys.path:  # (an example may import another: train_qat_mlp.py's data and model)
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.gpu
def test_gaussian_splat_gradients_match_finite_differences(device):
    """The WGSL backward pass of fit_gaussians_2d.py against central differences of its float64 NumPy loss, on a
    small random image (float32 kernels vs float64 differences: 2e-3 of the gradient's scale)."""
    ex = _example("fit_gaussians_2d")
    rng = np.random.default_rng(3)
    target = rng.uniform(0, 1, (6, 9, 3)).astype(np.float32)
    params = ex.init_splats(5, 9, 6, target, seed=4)
    params["opacity"] = rng.normal(0, 1, 5).astype(np.float32)
    opt = rlx_gpu.SGD(params, lr=0.0, device=device)
    gs = ex.GpuSplats(opt, target, 5)
    gs.gradients()
    for name, p in params.items():
        got = opt.grads[name].numpy()
        want = np.zeros(p.shape)
        for idx in np.ndindex(p.shape):
            hi, lo = {k: v.astype(np.float64) for k, v in params.items()}, {k: v.astype(np.float64) for k, v in
                                                                             params.items()}
            hi[name][idx] += 1e-4
            lo[name][idx] -= 1e-4
            want[idx] = (ex.numpy_loss(hi, target) - ex.numpy_loss(lo, target)) / 2e-4
        scale = max(np.abs(want).max(), 1e-6)
        assert np.abs(got - want).max() <= 2e-3 * scale, (name, got, want)


@pytest.mark.gpu
def test_wgsl_mlp_gradients_match_torch(device):
    """One batch of train_wgsl_mlp.py's WGSL forward/backward against torch autograd (1e-5 of the scale)."""
    torch = pytest.importorskip("torch", reason="torch autograd is the oracle here")
    pytest.importorskip("sklearn", reason="the example's data set")
    ex = _example("train_wgsl_mlp")
    train, test = ex.digits()
    params = ex.init_params()
    opt = rlx_gpu.SGD(params, lr=0.0, device=device)
    mlp = ex.GpuMLP(opt, train, test)
    mlp.gradients(1)
    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    x = torch.tensor(train[0][ex.BATCH:2 * ex.BATCH])
    y = torch.tensor(train[1][ex.BATCH:2 * ex.BATCH].astype(np.int64))
    loss = torch.nn.functional.cross_entropy(torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"], y)
    loss.backward()
    assert abs(mlp.batch_loss() - loss.item()) <= 1e-5 * max(1.0, loss.item())
    for k, t in p.items():
        want = t.grad.numpy()
        assert np.abs(opt.grads[k].numpy() - want).max() <= 1e-5 * max(1e-3, np.abs(want).max()), k


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
def test_qat_mlp_gradients_match_torch(device, bits):
    """One batch of train_qat_mlp.py's WGSL forward/backward against torch autograd through torch's own fake
    quantization: the weights per channel with the optimizer's exported scales, the input and both layers'
    outputs per tensor with the device observers' qparams, tanh's output with its fixed qparams; torch's
    straight-through gradients (the fifth batch: the observers' ranges no longer cover every activation). The loss
    and every grad within 1e-5 of the scale (float32 sums in another order; no activation lands on another code
    here)."""
    torch = pytest.importorskip("torch", reason="torch autograd and fake quantization are the oracle here")
    pytest.importorskip("sklearn", reason="the example's data set")
    ex = _example("train_qat_mlp")
    train, test = ex.digits()
    params = ex.qat_params(1)
    spec = f"int{bits}/channel"
    opt = rlx_gpu.SGD(params, lr=0.0, qat={"w1": spec, "w2": spec}, device=device)
    mlp = ex.GpuQatMLP(opt, train, test, bits)
    for i in (1, 2, 3, 4):  # (the observers' moving averages: some of batch 4's fc1 outputs fall outside their range)
        mlp.gradients(i)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}

    def weight(k):
        s = torch.tensor(opt.qat[k].scale())
        return torch.fake_quantize_per_channel_affine(p[k], s, torch.zeros(len(s), dtype=torch.int32), 0, lo, hi)

    def act(v, name):
        s, z = mlp.obs[name].calculate_qparams()
        return torch.fake_quantize_per_tensor_affine(v, float(s[0]), int(z[0]), 0, 127)

    x = torch.tensor(train[0][4 * ex.BATCH:5 * ex.BATCH])
    y = torch.tensor(train[1][4 * ex.BATCH:5 * ex.BATCH].astype(np.int64))
    z1 = act(x, "x") @ weight("w1").T + p["b1"]
    s1, zp1 = mlp.obs["z1"].calculate_qparams()
    assert ((torch.round(z1 * float(np.float32(1) / s1[0])) + int(zp1[0]) > 127)
            | (torch.round(z1 * float(np.float32(1) / s1[0])) + int(zp1[0]) < 0)).any()  # (the clamp masks count)
    h = torch.tanh(act(z1, "z1"))
    hq = torch.fake_quantize_per_tensor_affine(h, 1 / 128, 128, 0, 255)
    loss = torch.nn.functional.cross_entropy(act(hq @ weight("w2").T + p["b2"], "z2"), y)
    loss.backward()
    assert abs(mlp.batch_loss() - loss.item()) <= 1e-5 * max(1.0, loss.item())
    for k, t in p.items():
        want = t.grad.numpy()
        assert np.abs(opt.grads[k].numpy() - want).max() <= 1e-5 * max(1e-3, np.abs(want).max()), k
