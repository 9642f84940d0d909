"""Checkpoints: bit-exact resume in a fresh process, atomic writes, clear errors that change nothing."""
import json
import os
import re
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
    assert meta_a["names"] == ["a", "b"] and meta_a["steps"] == [7, 10]  # "a" has no grad at steps 1, 4, 7


@pytest.mark.gpu
def test_format_readable_with_numpy_alone(tmp_path, device):
    params = make_params([(3, 4), 5])
    opt = rlx_gpu.Adam(params, lr=0.01, amsgrad=True, device=device)
    opt.step(make_grads(params, np.random.default_rng(0)))
    opt.save(tmp_path / "c.npz")
    z = np.load(tmp_path / "c.npz", allow_pickle=False)
    meta = json.loads(bytes(z["__meta__"]))
    assert meta["class"] == "Adam" and meta["param_groups"][0]["lr"] == 0.01 and meta["param_groups"][0]["amsgrad"]
    assert meta["version"] == 4 and meta["names"] == ["t0", "t1"] and meta["dtypes"] == ["float32", "float32"]
    assert set(z.files) >= {"param/0", "state/0/exp_avg", "state/1/max_exp_avg_sq"}
    np.testing.assert_array_equal(z["param/0"], opt.params["t0"].numpy())
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


KILLED_SAVE = """
import os, signal, sys
import numpy as np
import rlx_gpu.reference as R
opt = R.AdamW({"w": np.ones(100000, np.float32)})
def savez(f, **kw):  # (half a file written, then the process is killed, as kill -9 mid-save does)
    f.write(b"x" * 200000)
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
np.savez = savez
opt.save(sys.argv[1])
"""


@pytest.mark.skipif(os.name != "posix", reason="kill -9 and process ids: POSIX")
def test_temporaries_of_killed_saves_are_removed_by_the_next(tmp_path):
    """issue 21 item 10: each save killed mid-write leaves its hidden temporary (25 kills left 13 files, 475 MB);
    the next save into that folder removes them, and only what is ours and stale: a temporary of a live process, of
    another host (until a day old), files of other names and this package's older temporaries (until a day old) stay."""
    import socket
    import time
    from rlx_gpu.core import atomic
    target = tmp_path / "c.npz"
    for _ in range(3):  # (each killed save removes the one killed before it: one temporary left, not three)
        r = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(target)], capture_output=True, timeout=120)
        assert r.returncode == -9, r.stderr[-2000:]
        assert len([p for p in tmp_path.iterdir() if p.name.startswith(".rlx-gpu-ckpt")]) == 1
    assert not target.exists()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host = atomic._host()
        keep = [f".rlx-gpu-ckpt.{host}.{live.pid}.0123abcd.npz", ".rlx-gpu-ckpt.elsewhere.17.0123abcd.npz",
                ".rlx-gpu-ckpt-abcd1234.npz", "tmpq1w2e3r4.npz", ".rlx-gpu-ckpt.notes", "c.npz.bak"]
        old = [".rlx-gpu-ckpt.elsewhere.18.0123abcd.npz", ".rlx-gpu-ckpt-wxyz6789.npz"]
        for name in keep + old:
            (tmp_path / name).write_bytes(b"not ours to judge")
        for name in old:  # (untouched for two days)
            os.utime(tmp_path / name, (time.time() - 2 * 86400,) * 2)
        opt = rlx_gpu.reference.AdamW({"w": np.ones(10, np.float32)})
        opt.save(target)
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == sorted(keep + ["c.npz"]), (left, socket.gethostname())
        assert rlx_gpu.reference.AdamW.load(target).params["w"].shape == (10,)
    finally:
        live.kill()
        live.wait()


# -- hardening: names, limits, tampered files ---------------------------------------------------------------------
NAMES = ["a", "a.npy", "x\x00y", "\ud800 lone surrogate", "n" * 70_000, "param/0", "state/0/exp_avg", "", "../up",
         "__meta__", "é ∑ 🙂"]


@pytest.mark.gpu
@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_every_str_name_round_trips(tmp_path, twin, device):
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal(i + 1).astype(np.float32) for i, n in enumerate(NAMES)}
    cls = rlx_gpu.reference.AdamW if twin else rlx_gpu.AdamW
    opt = cls(params, lr_scale={"a.npy": 0.5}, **({} if twin else {"device": device}))
    opt.step({n: np.ones_like(p) for n, p in params.items() if n != "a"})
    opt.save(tmp_path / "c.npz")
    again = cls.load(tmp_path / "c.npz", **({} if twin else {"device": device}))
    assert list(again.read_params()) == NAMES and again.lr_scale == opt.lr_scale
    for n, p in opt.read_params().items():
        assert again.read_params()[n].tobytes() == p.tobytes(), repr(n[:20])
    assert again.state_dict()["state"].keys() == opt.state_dict()["state"].keys()


@pytest.mark.gpu
def test_unwritable_checkpoint_is_refused_before_the_old_file_is_touched(tmp_path, device):
    opt = rlx_gpu.AdamW({"w": np.ones(3, np.float32)}, device=device)
    path = tmp_path / "c.npz"
    opt.save(path)
    old = path.read_bytes()
    opt.param_groups[0]["note"] = object()  # e.g. a scheduler's key that JSON cannot hold
    with pytest.raises(ValueError, match="cannot write this optimizer's hyperparameters"):
        opt.save(path)
    assert path.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["c.npz"]


@pytest.mark.gpu
@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_restore_applies_the_saved_lr_scale(tmp_path, twin, device):
    kw = {} if twin else {"device": device}
    cls = rlx_gpu.reference.SGD if twin else rlx_gpu.SGD
    p, g = {"a": np.ones(2, np.float32)}, {"a": np.ones(2, np.float32)}
    saved = cls(p, lr=0.1, lr_scale={"a": 0.01}, **kw)
    saved.save(tmp_path / "c.npz")
    restored = cls(p, lr=0.1, **kw)
    restored.restore(tmp_path / "c.npz")
    loaded = cls.load(tmp_path / "c.npz", **kw)
    for o in (saved, restored, loaded):
        o.step(g)
    assert restored.lr_scale == {"a": 0.01}
    for o in (restored, loaded):
        np.testing.assert_array_equal(o.read_params()["a"], saved.read_params()["a"])  # 0.999, not 0.9


@pytest.mark.gpu
@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_step_counts_past_the_limit_are_refused_and_counters_saturate(tmp_path, twin, device):
    from rlx_gpu.core.groups import MAX_STEP
    kw = {} if twin else {"device": device}
    cls = rlx_gpu.reference.AdamW if twin else rlx_gpu.AdamW
    p, g = {"w": np.ones(3, np.float32)}, {"w": np.ones(3, np.float32)}
    opt = cls(p, lr=1e-3, **kw)
    opt.step(g)
    before = (opt.read_params()["w"].tobytes(), opt.state_dict())
    for bad in (2 ** 63, 2 ** 64 + 5, MAX_STEP + 1, -1, 1.5, True, "3", np.array([1, 2])):
        sd = opt.state_dict()
        sd["param_groups"][0]["lr"] = 0.5
        sd["state"]["w"]["step"] = bad
        sd["state"]["w"]["exp_avg"] = np.full(3, 7.0, np.float32)
        with pytest.raises(ValueError, match="'step' of 'w' must be an int in"):
            opt.load_state_dict(sd)
        after = opt.state_dict()
        assert opt.read_params()["w"].tobytes() == before[0] and after["param_groups"] == before[1]["param_groups"]
        assert after["state"]["w"]["step"] == 1 and after["state"]["w"]["exp_avg"].tobytes() == \
            before[1]["state"]["w"]["exp_avg"].tobytes()
    sd = opt.state_dict()
    sd["state"]["w"]["step"] = MAX_STEP - 1
    opt.load_state_dict(sd)
    for _ in range(3):
        opt.step(g)
    assert opt.state_dict()["state"]["w"]["step"] == MAX_STEP  # saturates, never wraps to a negative count
    assert np.isfinite(opt.read_params()["w"]).all()
    # the same count in a checkpoint's metadata
    opt.save(tmp_path / "c.npz")
    z = dict(np.load(tmp_path / "c.npz"))
    meta = json.loads(bytes(z["__meta__"]))
    meta["steps"] = [2 ** 63]
    z["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(tmp_path / "big.npz", **z)
    with pytest.raises(ValueError, match="big.npz: the step of 'w' is 9223372036854775808"):
        cls.load(tmp_path / "big.npz", **kw)


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


@pytest.mark.gpu
@pytest.mark.parametrize("twin", [False, True], ids=["gpu", "twin"])
def test_version_1_files_still_load(twin, device):
    """tests/fixtures/checkpoint_v1_adamw.npz was written by the version 1 code (members named by tensor)."""
    kw = {} if twin else {"device": device}
    cls = rlx_gpu.reference.AdamW if twin else rlx_gpu.AdamW
    params = {"fc.weight": np.arange(12, dtype=np.float32).reshape(3, 4) / 10,
              "fc.bias": np.array([0.5, -0.5, 1.0], np.float32)}
    want = rlx_gpu.reference.AdamW(params, lr=0.01, lr_scale={"fc.bias": 0.5})
    for s in range(3):
        g = {n: np.full(p.shape, 0.1 * (s + 1), np.float32) for n, p in params.items()}
        if s == 1:
            del g["fc.bias"]
        want.step(g)
    got = cls.load(FIXTURES / "checkpoint_v1_adamw.npz", **kw)
    assert got.lr_scale == {"fc.weight": 1.0, "fc.bias": 0.5}
    for n in params:
        assert got.read_params()[n].tobytes() == want.params[n].tobytes()
        for k, v in want.state_dict()["state"][n].items():
            assert np.asarray(got.state_dict()["state"][n][k]).tobytes() == np.asarray(v).tobytes()


def _rewrite(src, dst, meta_fn=None, members=None, text_fn=None):
    """A copy of checkpoint ``src`` with its metadata (as an object, or as text) and members changed."""
    z = dict(np.load(src))
    meta = json.loads(bytes(z.pop("__meta__")))
    if meta_fn is not None:
        meta = meta_fn(meta)
    text = json.dumps(meta) if text_fn is None else text_fn(json.dumps(meta))
    z.update(members or {})
    z["__meta__"] = np.frombuffer(text.encode(), np.uint8)
    np.savez(dst, **z)


def _huge_header_file(src, dst, shape, meta_fn=None):
    """A checkpoint whose param/0 member has a .npy header claiming ``shape`` (and 16 bytes of data)."""
    import io
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            buf = io.BytesIO()
            if info.filename == "param/0.npy":
                np.lib.format.write_array_header_2_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
                data = buf.getvalue() + b"\0" * 16
            elif info.filename == "__meta__.npy" and meta_fn is not None:
                meta = meta_fn(json.loads(np.load(io.BytesIO(data)).tobytes()))
                np.lib.format.write_array(buf, np.frombuffer(json.dumps(meta).encode(), np.uint8))
                data = buf.getvalue()
            zout.writestr(info.filename, data)


@pytest.mark.gpu
def test_tampered_checkpoints_raise_value_error_naming_the_file(tmp_path, device):
    opt = rlx_gpu.AdamW({"w": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float32)}, device=device)
    opt.step({"w": np.ones((2, 3), np.float32)})
    good = tmp_path / "good.npz"
    opt.save(good)
    before = (opt.read_params(), opt.state_dict())
    np.save(tmp_path / "plain.npy", np.ones(3, np.float32))
    cases = {
        "list_meta.npz": lambda p: _rewrite(good, p, lambda m: [m]),
        "reference.npz": lambda p: _rewrite(good, p, lambda m: dict(m, **{"class": "reference"})),
        "base.npz": lambda p: _rewrite(good, p, lambda m: dict(m, **{"class": "Optimizer"})),
        "number_class.npz": lambda p: _rewrite(good, p, lambda m: dict(m, **{"class": 3})),
        "f64_state.npz": lambda p: _rewrite(good, p, members={"state/0/exp_avg": np.zeros((2, 3))}),
        "bad_shape_state.npz": lambda p: _rewrite(good, p, members={"state/0/exp_avg": np.zeros(5, np.float32)}),
        "huge_header.npz": lambda p: _huge_header_file(good, p, (2 ** 40,)),
        "huge_meta_shape.npz": lambda p: _huge_header_file(good, p, (2 ** 40,), lambda m: dict(
            m, shapes=[[2 ** 40], [3]])),
        "names_not_list.npz": lambda p: _rewrite(good, p, lambda m: dict(m, names={"w": 0})),
        "steps_str.npz": lambda p: _rewrite(good, p, lambda m: dict(m, steps=["1", None])),
        "deep.npz": lambda p: _rewrite(good, p, text_fn=lambda t: t.replace('"lr_scale": [1.0, 1.0]',
                                                                            '"lr_scale": ' + "[" * 9000 + "]" * 9000)),
        "bad_hyper.npz": lambda p: _rewrite(good, p, lambda m: dict(m, param_groups=[
            dict(m["param_groups"][0], lr="fast")])),
    }
    for name, make in cases.items():
        path = tmp_path / name
        make(path)
        for call in (lambda p=path: opt.restore(p), lambda p=path: rlx_gpu.Optimizer.load(p, device=device),
                     lambda p=path: rlx_gpu.AdamW.load(p, device=device),
                     lambda p=path: rlx_gpu.reference.AdamW.load(p)):
            with pytest.raises(ValueError, match=re.escape(str(path))):
                call()
        now = (opt.read_params(), opt.state_dict())
        assert all(now[0][n].tobytes() == before[0][n].tobytes() for n in before[0]), name
        assert now[1]["param_groups"] == before[1]["param_groups"], name
    with pytest.raises(ValueError, match="plain.npy: not a readable rlx_gpu checkpoint"):
        opt.restore(tmp_path / "plain.npy")
    with pytest.raises(TypeError, match="expected a dict with 'state' and 'param_groups', got list"):
        opt.load_state_dict([])
    with pytest.raises(TypeError, match="'state' must be a dict"):
        opt.load_state_dict({"state": [], "param_groups": before[1]["param_groups"]})
