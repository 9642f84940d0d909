"""GPU tests run only where a WebGPU adapter exists; a subprocess probe decides, so a crash in the
native library cannot take pytest down. The reason is printed in the test summary when they skip."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

# torch (and, through torch.optim, triton where pip brought it) is imported before any wgpu device exists: on the
# CPU Vulkan adapter, importing triton after a device was made crashes the process (README, "Using it from PyTorch").
try:
    import torch  # noqa: F401
    import torch.optim  # noqa: F401
except ImportError:
    pass

_PROBE = ("import rlx_gpu, numpy as np; d = rlx_gpu.get_device(); "
          "o = rlx_gpu.SGD({'x': np.ones(3, np.float32)}, lr=0.5, device=d); o.step({'x': np.ones(3, np.float32)}); "
          "assert (o.params['x'].numpy() == 0.5).all(); print(d.name, '|', d.info['backend'], '|', d.info['type'])")


def _probe():
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, "the adapter probe timed out"
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["probe failed"])[-1]
    return r.stdout.strip(), None


ADAPTER, NO_GPU_REASON = _probe()


def pytest_report_header(config):
    return f"rlx_gpu adapter: {ADAPTER}" if ADAPTER else f"rlx_gpu: NO ADAPTER, GPU tests skip: {NO_GPU_REASON}"


def pytest_collection_modifyitems(config, items):
    if ADAPTER:
        return
    if os.environ.get("RLX_GPU_REQUIRE_ADAPTER"):  # set by CI: GPU tests must run there, never skip
        raise pytest.UsageError(f"RLX_GPU_REQUIRE_ADAPTER is set but no WebGPU adapter works: {NO_GPU_REASON}")
    skip = pytest.mark.skip(reason=f"no WebGPU adapter: {NO_GPU_REASON}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a WebGPU adapter (skipped, with the reason, where none exists)")


@pytest.fixture(scope="session")
def device():
    import rlx_gpu
    return rlx_gpu.get_device()
