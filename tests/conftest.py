"""GPU tests run only where a WebGPU adapter exists; a subprocess probe decides, so a crash in the
native library cannot take pytest down. The reason is printed in the test summary when they skip."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

# torch (and, through torch.optim, triton where pip brought it) is imported before any wgpu device exists: on the
# CPU Vulkan adapter, importing triton after a device was made crashes the process (docs/guides/pytorch.md).
try:
    import torch  # noqa: F401
    import torch.optim  # noqa: F401
except ImportError:
    pass

#: The WebGPU implementation the suite runs on (RLX_GPU_IMPLEMENTATION, as rlx_gpu reads it; wgpu-native by default).
IMPLEMENTATION = os.environ.get("RLX_GPU_IMPLEMENTATION", "").strip().lower() or "wgpu-native"
OTHER = {"wgpu-native": "dawn", "dawn": "wgpu-native"}.get(IMPLEMENTATION, "dawn")

_PROBE = ("import rlx_gpu, numpy as np; d = rlx_gpu.get_device(); "
          "o = rlx_gpu.SGD({'x': np.ones(3, np.float32)}, lr=0.5, device=d); o.step({'x': np.ones(3, np.float32)}); "
          "assert (o.params['x'].numpy() == 0.5).all(); "
          "print(d.name, '|', d.info['backend'], '|', d.info['type'], '|', d.implementation)")


def _probe(implementation=IMPLEMENTATION):
    env = dict(os.environ, RLX_GPU_IMPLEMENTATION=implementation)
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return None, f"the adapter probe on {implementation} timed out"
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["probe failed"])[-1]
    out = r.stdout.strip().splitlines()[-1]
    if not out.endswith(f"| {implementation}"):  # (the device must run on the implementation asked for)
        return None, f"asked for {implementation}, the probe's device runs on {out.rsplit('|', 1)[-1].strip()}"
    return out, None


ADAPTER, NO_GPU_REASON = _probe()


def pytest_report_header(config):
    return f"rlx_gpu adapter: {ADAPTER}" if ADAPTER else f"rlx_gpu: NO ADAPTER, GPU tests skip: {NO_GPU_REASON}"


@pytest.fixture(scope="session")
def other_implementation():
    """The other WebGPU implementation's name, where it finds an adapter here too (probed in a child process);
    skips with the reason where not, fails instead for Dawn where RLX_GPU_REQUIRE_DAWN is set (.ci/run)."""
    found, why = _probe(OTHER)
    if found:
        return OTHER
    if OTHER == "dawn" and os.environ.get("RLX_GPU_REQUIRE_DAWN"):
        pytest.fail(f"RLX_GPU_REQUIRE_DAWN is set but Dawn finds no adapter: {why}")
    pytest.skip(f"{OTHER} finds no adapter here: {why}")


def pytest_collection_modifyitems(config, items):
    if ADAPTER:
        return
    if os.environ.get("RLX_GPU_REQUIRE_ADAPTER"):  # set by CI: GPU tests must run there, never skip
        raise pytest.UsageError(f"RLX_GPU_REQUIRE_ADAPTER is set but no WebGPU adapter works on {IMPLEMENTATION}: "
                                f"{NO_GPU_REASON}")
    if IMPLEMENTATION == "dawn" and os.environ.get("RLX_GPU_REQUIRE_DAWN"):
        raise pytest.UsageError(f"RLX_GPU_REQUIRE_DAWN is set but Dawn finds no adapter: {NO_GPU_REASON}")
    skip = pytest.mark.skip(reason=f"no WebGPU adapter: {NO_GPU_REASON}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a WebGPU adapter (skipped, with the reason, where none exists)")
    config.addinivalue_line("markers", "serial: times itself against a control; ./run.sh test runs it alone, after the "
                            "tests it spreads over workers")


@pytest.fixture(scope="session")
def device():
    import rlx_gpu
    return rlx_gpu.get_device()
