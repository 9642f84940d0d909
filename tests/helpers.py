import numpy as np
import pytest

from cases import ATOL, RTOL


def make_params(sizes, seed=0, prefix="t"):
    rng = np.random.default_rng(seed)
    return {f"{prefix}{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(sizes)}


def make_grads(params, rng, drop=()):
    return {n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items() if n not in drop}


def _close(actual, desired, msg):
    atol = ATOL * max(1.0, float(np.abs(desired).max(initial=0.0)))
    np.testing.assert_allclose(actual, desired, rtol=RTOL, atol=atol, err_msg=msg)


def assert_same(gpu, twin, what=""):
    """Every parameter and every state buffer (and step count) of a GPU optimizer against its twin."""
    for n, p in twin.params.items():
        _close(gpu.params[n].numpy(), p, f"{what} param {n}")
    gs, ts = gpu.state_dict()["state"], twin.state_dict()["state"]
    assert gs.keys() == ts.keys(), f"{what}: tensors with state differ: {sorted(gs)} vs {sorted(ts)}"
    for n in ts:
        assert gs[n].keys() == ts[n].keys(), f"{what}: state names of {n}: {sorted(gs[n])} vs {sorted(ts[n])}"
        assert gs[n]["step"] == ts[n]["step"], f"{what}: step of {n}"
        for k, v in ts[n].items():
            if k != "step":
                _close(gs[n][k], v, f"{what} {k} of {n}")


def snapshot(opt):
    """Every parameter and state buffer of an optimizer as bytes (step counts as they are): equal snapshots mean
    nothing changed, bit for bit."""
    sd = opt.state_dict()
    return ({n: p.tobytes() for n, p in opt.read_params().items()},
            {n: {k: (np.asarray(v).tobytes() if k != "step" else v) for k, v in st.items()}
             for n, st in sd["state"].items()})


def steps_with_a_skip(gpu, twin, make_grads, steps: int, bad_step: int, bad: tuple) -> None:
    """``steps`` steps of ``gpu`` and ``twin`` on ``make_grads()`` (a fresh dict each step), with an inf at ``bad`` =
    (name, index) on step ``bad_step``: both skip it and the GPU optimizer changes nothing, bit for bit."""
    for s in range(steps):
        g = make_grads()
        if s == bad_step:
            g[bad[0]][bad[1]] = np.inf
            before = snapshot(gpu)
        gpu.step(g)
        twin.step(g)
        if s == bad_step:
            assert gpu.last_step_skipped and twin.last_step_skipped and snapshot(gpu) == before


def torch_clip(grads: dict, max_norm, norm_type):
    """torch.nn.utils.clip_grad_norm_ on copies of ``grads`` (name -> array): (total norm, clipped grads)."""
    torch = pytest.importorskip("torch", reason="torch is the oracle here")
    ts = [torch.tensor(g) for g in grads.values()]
    for t in ts:
        t.grad = t.clone()
    total = torch.nn.utils.clip_grad_norm_(ts, max_norm, norm_type=norm_type, foreach=False)
    return float(total), {n: t.grad.numpy() for n, t in zip(grads, ts)}


def partition_with_adamw(cls, twin_cls, p0: dict, device, rng, atol: float, steps: int = 3) -> None:
    """``cls`` (lr 1e-2) for the matrices and AdamW for a bias in one rlx_gpu.Partition: the matrices follow
    ``twin_cls`` run alone (within ``atol``)."""
    import rlx_gpu
    both = {**p0, "bias": np.zeros(7, np.float32)}
    part = rlx_gpu.Partition(both, label=lambda n, s: "m" if len(s) == 2 else "adamw", device=device,
                             optimizers={"m": (cls, {"lr": 1e-2}), "adamw": (rlx_gpu.AdamW, {})})
    alone = twin_cls(p0, lr=1e-2)
    for _ in range(steps):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in both.items()}
        part.step(g)
        alone.step({n: g[n] for n in p0})
    for n in p0:
        np.testing.assert_allclose(part.read_params()[n], alone.params[n], atol=atol, err_msg=n)


def resumed(opt, path, rng, steps: int, device, prepare=None):
    """``opt`` saved to ``path`` and loaded as a second optimizer (``prepare(other)`` then, e.g. to pass a probe
    again), both stepped ``steps`` times with the same random grads: (opt, other) for the caller's comparison."""
    opt.save(path)
    other = type(opt).load(path, device=device)
    if prepare is not None:
        prepare(other)
    shapes = {n: p.shape for n, p in opt.params.items()}
    for _ in range(steps):
        g = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
        opt.step(g)
        other.step(g)
    return opt, other


def run_blocks(codes: list, tmp_path) -> str:
    """Documentation code blocks run as written: in order, in one namespace, in a fresh process, torch imported first
    where it is installed (the import order torch needs; blocks that import torch skip without it). Their stdout."""
    import subprocess
    import sys
    import textwrap
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    parts = ["try:\n    import torch, torch.optim\nexcept ImportError:\n    pass"]
    for i, code in enumerate(codes):
        if "import torch" in code and not have_torch:
            continue
        parts.append(f"print('--- block {i}', flush=True)\n" + code)
    script = tmp_path / "blocks.py"
    script.write_text("\n".join(parts))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, textwrap.shorten(r.stdout[-1500:], 1500) + "\n" + r.stderr[-3000:]
    assert r.stdout.count("--- block") == len(parts) - 1
    return r.stdout


def load_script(path, name: str):
    """A benchmark script (not a package module) imported from its file, as ``name``."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_main(device, label: str, code: str, inputs: dict, outputs: dict, workgroups: int) -> dict:
    """Bind ``inputs`` (binding name -> array, uploaded) and ``outputs`` (binding name -> bytes), dispatch
    ``workgroups`` workgroups of ``main`` in ``code``, and return each output's bytes (uint8 arrays)."""
    from rlx_gpu.runtime import get_kernel
    k = get_kernel(device, label, code, "main")
    bufs = {n: device.buffer(a.nbytes, n, data=a) for n, a in inputs.items()}
    bufs.update({n: device.buffer(size, n) for n, size in outputs.items()})
    enc = device.device.create_command_encoder()
    k.dispatch(enc, k.bind(bufs), workgroups)
    device.queue.submit([enc.finish()])
    return {n: np.asarray(device.read(bufs[n])) for n in outputs}
