"""The thread-safety contract (README, "Reliability"): several optimizers on one device from several threads work;
one optimizer (or GradScaler) used from several threads is serialised by its lock. Each scenario runs in a child
process, so that a native crash (the failure these guard against) is a failed test, not a dead pytest."""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

PRELUDE = """
import threading, numpy as np, rlx_gpu
errors = []
def run(fns):
    def wrap(fn):
        def go():
            try:
                fn()
            except BaseException as e:
                errors.append(repr(e))
        return go
    ts = [threading.Thread(target=wrap(f)) for f in fns]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors
"""

SCENARIOS = {
    "two optimizers, clip and last_grad_norm": """
def work(seed):
    o = rlx_gpu.AdamW({"w": np.ones(1000, np.float32)}, clip_grad_norm=1.0)
    twin = rlx_gpu.reference.AdamW({"w": np.ones(1000, np.float32)}, clip_grad_norm=1.0)
    rng = np.random.default_rng(seed)
    for i in range(300):
        g = {"w": rng.standard_normal(1000).astype(np.float32)}
        o.step(g); twin.step(g)
        assert abs(o.last_grad_norm() - twin.last_grad_norm()) <= 1e-5 * twin.last_grad_norm()
    np.testing.assert_allclose(o.params["w"].numpy(), twin.params["w"], rtol=2e-5, atol=1e-6)
run([lambda: work(1), lambda: work(2)])
""",
    "two optimizers with GradScalers, get_scale": """
def work(seed):
    o, s = rlx_gpu.SGD({"w": np.ones(5000, np.float32)}, lr=0.1), rlx_gpu.GradScaler(init_scale=8.0)
    for i in range(200):
        g = np.full(5000, s.get_scale(), np.float32)
        if i % 17 == 3:
            g[7] = np.inf
        s.step(o, {"w": g}); s.update()
        s.get_scale()
    o.read_params()
run([lambda: work(1), lambda: work(2)])
""",
    "one optimizer: steps against read_params, save, state_dict": """
import os, tempfile
o = rlx_gpu.AdamW({"w": np.ones(20000, np.float32), "b": np.zeros(7, np.float32)}, clip_grad_norm=1.0,
                  skip_nonfinite=True)
stop = threading.Event()
path = os.path.join(tempfile.mkdtemp(), "c.npz")
def stepper():
    for i in range(300):
        o.step({"w": np.full(20000, 0.5, np.float32), "b": np.ones(7, np.float32)})
    stop.set()
def reader():
    while not stop.is_set():
        o.read_params(); o.last_grad_norm(); o.last_step_skipped
def saver():
    while not stop.is_set():
        o.save(path); o.state_dict()
run([stepper, reader, saver])
with o.lock:  # an atomic pair: the params and the state of the same step
    sd, p = o.state_dict(), o.read_params()
assert sd["state"]["w"]["step"] == 300
again = rlx_gpu.AdamW.load(path)
assert again.state_dict()["state"]["w"]["step"] <= 300
""",
    "one GradScaler shared by two optimizers in two threads": """
s = rlx_gpu.GradScaler(init_scale=4.0, growth_interval=5)
opts = [rlx_gpu.SGD({"w": np.ones(3000, np.float32)}, lr=0.01) for _ in range(2)]
def work(o):
    for i in range(150):
        with s.lock:  # step and update of one optimizer as one unit against the other thread
            s.step(o, {"w": np.ones(3000, np.float32)}); s.update()
run([lambda: work(opts[0]), lambda: work(opts[1])])
assert s.get_scale() == 4.0 * 2 ** 60, s.get_scale()  # 300 clean steps, growth every 5
""",
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_threads_do_not_crash(name):
    code = PRELUDE + textwrap.dedent(SCENARIOS[name]) + "\nprint('ok')\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), \
        f"exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
