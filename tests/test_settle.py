"""A script that ends right after a step exits cleanly: every device's queue is waited for at interpreter exit
(rlx_gpu/runtime/settle.py). Without it, on llvmpipe with torch imported and the shader cache off, 5 of 6 such
runs ended in SIGSEGV (lavapipe still JIT-compiling the last step's pipelines as the libraries were torn down)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rlx_gpu
from rlx_gpu.runtime import settle

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent("""
    try:
        import torch  # noqa: F401  (its static objects torn down at exit, as in a torch user's script)
    except ImportError:
        pass
    import numpy as np
    import rlx_gpu
    params = {"h.0.w": np.random.randn(64, 32).astype(np.float32), "emb": np.random.randn(100, 32).astype(np.float32),
              "bias": np.zeros(32, np.float32)}
    opt = rlx_gpu.Partition(params, label=lambda name, shape: "muon" if name.startswith("h.") else "adamw",
                            optimizers={"muon": (rlx_gpu.Muon, {"lr": 0.02}), "adamw": (rlx_gpu.AdamW, {"lr": 3e-4})},
                            clip_grad_norm=1.0, skip_nonfinite=True)
    opt.step({n: np.ones_like(p) for n, p in params.items()})
    print("stepped", flush=True)
""")


def test_a_script_ending_right_after_a_step_exits_cleanly(tmp_path):
    script = tmp_path / "ends_after_a_step.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "MESA_SHADER_CACHE_DISABLE": "true"}  # (every run compiles: the crash needed a cold cache)
    for run in range(3):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                           cwd=tmp_path)
        assert r.returncode == 0 and "stepped" in r.stdout, (run, r.returncode, r.stderr[-2000:])


def test_settle_all_waits_for_each_live_device_once(device):
    opt = rlx_gpu.AdamW({"w": np.ones(1000, np.float32)}, device=device)
    view = device.with_binding_cap(64 * 1024)  # (another view of the same wgpu device: settled once)
    opt.step({"w": np.ones(1000, np.float32)})
    assert device in settle._live and view in settle._live and view.device is device.device
    want = len({id(d.device) for d in list(settle._live) if not d.lost})
    assert settle.settle_all() == want >= 1
    np.testing.assert_array_equal(opt.read_params()["w"], opt.read_params()["w"])  # (still usable afterwards)


def test_sync_gives_up_on_a_lock_held_elsewhere(device):
    """``Device.sync(lock_timeout=...)`` (what settle_all waits with): False, having done nothing, while another
    thread holds the transfer lock past the timeout; True once the lock is free."""
    import threading
    held, release = threading.Event(), threading.Event()

    def hold():
        with device.io_lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(30)
        assert device.sync(lock_timeout=0.05) is False
    finally:
        release.set()
        t.join()
    assert device.sync(lock_timeout=5) is True and device.sync() is True
