"""Checkpoints: bit-exact resume in a fresh process, atomic writes, clear errors that change nothing."""
import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import rlx_gpu
from helpers import make_grads, make_params

SCRIPT = r"""
import sys, numpy as np, rlx_gpu
from rlx_gpu import reference
phase, path, out, cls_name, twin = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
mod = reference if twin else rlx_gpu
cls = getattr(mod, cls_name)
rng0 = np.random.default_rng(0)
params = {"a": rng0.standard_normal((7, 9)).astype(np.float32), "b": rng0.standard_normal(1001).astype(np.float32)}
def grads(s):
    r = np.random.default_rng(100 + s)
    g = {n: r.standard_normal(p.shape).astype(np.float32) for n, p in params.items()}
    if s % 3 == 1: del g["a"]
    return g
N, K = 10, 4
if phase == "straight":
    opt = cls(params)
    for s in range(N): opt.step(grads(s))
elif phase == "first":
    opt = cls(params)
    for s in range(K): opt.step(grads(s))
    opt.save(path)
    sys.exit(0)
else:
    opt = cls.load(path)
    for s in range(K, N): opt.step(grads(s))
opt.save(out)
"""


def arrays(path):
    z = np.load(path)
    return {k: z[k] for k in z.files if k != "__meta__"}, json.loads(bytes(z["__meta__"]))


@pytest.mark.gpu
@pytest.mark.parametrize("cls_name", ["AdamW", "NAdamW", "Adafactor", "SGD"])
@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_resume_in_fresh_process_is_bit_exact(tmp_path, cls_name, twin):
    run = lambda *a: subprocess.run([sys.executable, "-c", SCRIPT, *a, cls_name, "1" if twin else "0"],  # noqa: E731
                                    capture_output=True, text=True, timeout=300)
    for args in (("straight", "-", tmp_path / "a.npz"), ("first", tmp_path / "k.npz", "-"),
                 ("resume", tmp_path / "k.npz", tmp_path / "b.npz")):
        r = run(*map(str, args))
        assert r.returncode == 0, r.stderr[-3000:]
    a, meta_a = arrays(tmp_path / "a.npz")
    b, meta_b = arrays(tmp_path / "b.npz")
    assert a.keys() == b.keys() and meta_a == meta_b
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k  # bit for bit
    assert meta_a["steps"] == {"a": 7, "b": 10}  # "a" has no grad at steps 1, 4, 7


@pytest.mark.gpu
def test_format_readable_with_numpy_alone(tmp_path, device):
    params = make_params([(3, 4), 5])
    opt = rlx_gpu.Adam(params, lr=0.01, amsgrad=True, device=device)
    opt.step(make_grads(params, np.random.default_rng(0)))
    opt.save(tmp_path / "c.npz")
    z = np.load(tmp_path / "c.npz", allow_pickle=False)
    meta = json.loads(bytes(z["__meta__"]))
    assert meta["class"] == "Adam" and meta["param_groups"][0]["lr"] == 0.01 and meta["param_groups"][0]["amsgrad"]
    assert set(z.files) >= {"param/t0", "state/t0/exp_avg", "state/t1/max_exp_avg_sq"}
    np.testing.assert_array_equal(z["param/t0"], opt.params["t0"].numpy())
    again = rlx_gpu.Optimizer.load(tmp_path / "c.npz", device=device)  # the base class picks the class
    assert type(again) is rlx_gpu.Adam and again.param_groups[0]["amsgrad"] is True


@pytest.mark.gpu
def test_bad_files_raise_and_change_nothing(tmp_path, device):
    params = make_params([(3, 4), 5])
    opt = rlx_gpu.AdamW(params, device=device)
    opt.step(make_grads(params, np.random.default_rng(0)))
    good = tmp_path / "good.npz"
    opt.save(good)
    before = (opt.read_params(), opt.state_dict())
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    (tmp_path / "cut.npz").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    other = rlx_gpu.SGD(make_params([(3, 4), 5]), device=device)
    other.save(tmp_path / "sgd.npz")
    shaped = rlx_gpu.AdamW(make_params([(4, 3), 5]), device=device)
    shaped.save(tmp_path / "shape.npz")
    with zipfile.ZipFile(tmp_path / "nometa.npz", "w") as zf:
        zf.writestr("param/t0.npy", b"")
    cases = [("junk.npz", "not a readable rlx_gpu checkpoint"), ("cut.npz", "checkpoint"),
             ("sgd.npz", "checkpoint of SGD, this optimizer is AdamW"), ("shape.npz", "do not match"),
             ("nometa.npz", "not a readable rlx_gpu checkpoint")]
    for name, msg in cases:
        with pytest.raises(ValueError, match=msg):
            opt.restore(tmp_path / name)
        params_now, sd_now = opt.read_params(), opt.state_dict()
        for n in params_now:
            assert params_now[n].tobytes() == before[0][n].tobytes()
            for k, v in before[1]["state"][n].items():
                assert np.asarray(sd_now["state"][n][k]).tobytes() == np.asarray(v).tobytes()
    with pytest.raises(ValueError, match="checkpoint of SGD, cannot load it as AdamW"):
        rlx_gpu.AdamW.load(tmp_path / "sgd.npz", device=device)
    with pytest.raises(FileNotFoundError):
        rlx_gpu.AdamW.load(tmp_path / "missing.npz")


@pytest.mark.gpu
def test_crash_mid_save_leaves_old_file(tmp_path, monkeypatch, device):
    params = make_params([10])
    opt = rlx_gpu.SGD(params, momentum=0.9, device=device)
    path = tmp_path / "c.npz"
    opt.save(path)
    old = path.read_bytes()
    opt.step(make_grads(params, np.random.default_rng(1)))

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(OSError, match="disk full"):
        opt.save(path)
    assert path.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]  # no temporary file left behind
