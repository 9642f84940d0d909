"""The WebGPU implementation (rlx_gpu/runtime/implementation.py): the one asked for is the one in use, switching
is refused once one is in use, bad names are clear errors, feature names are spelled one way; the CLI on both."""
import json
import os
import subprocess
import sys

import pytest

import rlx_gpu
from rlx_gpu.runtime import implementation as impl

from conftest import IMPLEMENTATION

PACKAGE = {"wgpu-native": "wgpu", "dawn": "wgpudawn"}


def py(code, implementation=IMPLEMENTATION, **env):
    """Run ``code`` in a fresh process on ``implementation`` (None: RLX_GPU_IMPLEMENTATION unset)."""
    e = {k: v for k, v in os.environ.items() if k != "RLX_GPU_IMPLEMENTATION"}
    if implementation:
        e["RLX_GPU_IMPLEMENTATION"] = implementation
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**e, **env})


WHO = """
import sys, numpy as np, rlx_gpu
o = rlx_gpu.AdamW({"w": np.ones(5, np.float32)}); o.step({"w": np.ones(5, np.float32)})
d = o.device
print(d.implementation, rlx_gpu.implementation(), type(d.wgpu_device).__module__,
      "wgpu" in sys.modules, "wgpudawn" in sys.modules)
"""


@pytest.mark.gpu
def test_the_implementation_in_use_is_the_one_asked_for():
    """The device's objects come from that implementation's package, and the other package is never imported
    (wgpudawn's install_as_wgpu is not used: a user's own ``import wgpu`` stays wgpu-py)."""
    r = py(WHO)
    assert r.returncode == 0, r.stderr[-2000:]
    name, reported, module, has_wgpu, has_dawn = r.stdout.split()
    assert name == reported == IMPLEMENTATION
    assert module.startswith(PACKAGE[IMPLEMENTATION] + ".backends.")
    assert (has_wgpu, has_dawn) == (("True", "False") if IMPLEMENTATION == "wgpu-native" else ("False", "True"))
    if IMPLEMENTATION == "dawn":
        r = py(WHO + "import wgpu; print(type(wgpu.gpu.enumerate_adapters_sync()[0]).__module__)")
        assert r.returncode == 0 and r.stdout.split()[-1].startswith("wgpu.backends.wgpu_native"), r.stderr[-2000:]


@pytest.mark.gpu
def test_set_implementation_before_the_first_device_and_refused_after():
    code = f"""
import rlx_gpu, pytest
rlx_gpu.set_implementation({IMPLEMENTATION!r}); rlx_gpu.set_implementation({IMPLEMENTATION.upper()!r})
d = rlx_gpu.get_device()
assert d.implementation == {IMPLEMENTATION!r}
rlx_gpu.set_implementation({IMPLEMENTATION!r})  # (the same one: nothing to do)
other = {"dawn" if IMPLEMENTATION == "wgpu-native" else "wgpu-native"!r}
with pytest.raises(RuntimeError, match="already runs on '{IMPLEMENTATION}'.*RLX_GPU_IMPLEMENTATION=" + other):
    rlx_gpu.set_implementation(other)
assert rlx_gpu.implementation() == {IMPLEMENTATION!r} and rlx_gpu.get_device() is d
print("ok")
"""
    other = "dawn" if IMPLEMENTATION == "wgpu-native" else "wgpu-native"
    r = py(code, implementation=other)  # (set_implementation overrides the environment variable)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_bad_names_are_clear_errors_and_change_nothing():
    before = impl.implementation()
    for bad in ("vulkan", "", None, 3, "wgpu"):
        with pytest.raises(ValueError, match="unknown WebGPU implementation .*expected one of wgpu-native, dawn"):
            rlx_gpu.set_implementation(bad)
    assert impl.implementation() == before
    r = py("import rlx_gpu; rlx_gpu.get_device()", implementation="metal")
    assert r.returncode != 0 and "RLX_GPU_IMPLEMENTATION=metal: unknown WebGPU implementation 'metal'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "rlx_gpu", "info"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, RLX_GPU_IMPLEMENTATION="metal"))
    assert r.returncode == 2 and r.stderr.startswith("rlx-gpu: RLX_GPU_IMPLEMENTATION=metal") and not r.stdout


def test_default_is_wgpu_native():
    r = py("import rlx_gpu; print(rlx_gpu.implementation())", implementation=None)
    assert r.stdout.strip() == "wgpu-native", r.stderr


def test_a_missing_implementation_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(impl._MODULES, "dawn", "no_such_module_rlx")
    with pytest.raises(ImportError, match=r"needs the module 'no_such_module_rlx'.*pip install rlx_gpu\[dawn\]"):
        impl.load("dawn")


class Fake:
    def __init__(self, *features):
        self.features = set(features)


def test_feature_names_are_spelled_one_way():
    """wgpu-native's ``subgroup`` and Dawn's ``subgroups`` are both ``subgroups``; wgpu-native's
    ``mappable-primary-buffers`` is Dawn's ``buffer-map-extended-usages``; and back, to request them."""
    assert impl.features(Fake("subgroup", "shader-f16"), "wgpu-native") == {"subgroups", "shader-f16"}
    assert impl.features(Fake("subgroups", "buffer-map-extended-usages"), "dawn") == {"subgroups",
                                                                                      "mappable-primary-buffers"}
    assert impl.features(Fake("mappable-primary-buffers"), "wgpu-native") == {"mappable-primary-buffers"}
    assert impl.native_feature("subgroups", "wgpu-native") == "subgroup"
    assert impl.native_feature("subgroups", "dawn") == "subgroups"
    assert impl.native_feature("mappable-primary-buffers", "dawn") == "buffer-map-extended-usages"
    assert impl.native_feature("shader-f16", "dawn") == "shader-f16"


@pytest.mark.gpu
def test_device_features_use_rlx_gpus_names(device):
    assert "subgroup" not in device.features and "buffer-map-extended-usages" not in device.features
    if device.host_mappable:
        assert "mappable-primary-buffers" in device.features
    if IMPLEMENTATION == "dawn":
        from wgpudawn.backends.dawn import extras
        assert set(impl.DAWN_TOGGLES) <= set(extras.get_toggles(device.adapter))


@pytest.mark.gpu
def test_devices_ask_for_the_tensor_core_features(device):
    """Every feature of impl.FEATURES the adapter offers is the device's (subgroups, and on Dawn
    chromium-experimental-subgroup-matrix); Device.subgroup_matrix_configs lists the adapter's configurations only
    where the device has the feature (empty on wgpu-native and on llvmpipe), and "auto" picks subgroup matrices
    exactly where an f16 16x16x16 configuration with f32 results is among them."""
    offered = impl.features(device.adapter)
    assert {f for f in impl.FEATURES if f in offered} <= device.features
    configs = device.subgroup_matrix_configs
    has = "chromium-experimental-subgroup-matrix" in device.features
    assert has or configs == []
    if has:
        assert configs == impl.properties(device.adapter)["subgroup_matrix_configs"]
    want = any((c["component_type"], c["result_component_type"], c["m"], c["n"], c["k"]) == ("f16", "f32", 16, 16, 16)
               for c in configs)
    if "shader-f16" in device.features and not os.environ.get("RLX_GPU_GEMM_PATH"):
        assert rlx_gpu.linalg.gemm_path("float16", device) == ("subgroup-matrix" if want else "tiled")


@pytest.mark.gpu
def test_version_and_info_name_both(other_implementation):
    r = subprocess.run([sys.executable, "-m", "rlx_gpu", "--version"], capture_output=True, text=True, timeout=120)
    want = "(wgpu-py " if IMPLEMENTATION == "wgpu-native" else "(wgpudawn "
    assert r.returncode == 0 and want in r.stdout and ("dawn " in r.stdout) == (IMPLEMENTATION == "dawn")
    r = subprocess.run([sys.executable, "-m", "rlx_gpu", "info", "--json"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    assert rep["implementation"] == IMPLEMENTATION and set(rep["implementations"]) == set(impl.NAMES)
    for name, part in rep["implementations"].items():
        assert part["in_use"] == (name == IMPLEMENTATION)
        assert part["adapters"] and not part.get("error"), part
        assert all(a["limits"]["max-storage-buffer-binding-size"] > 0 for a in part["adapters"])
    assert rep["implementations"]["dawn"]["toggles"] == list(impl.DAWN_TOGGLES)
    assert {"wgpu-py", "wgpu-native", "wgpudawn", "dawn"} <= set(rep["versions"])
    r = subprocess.run([sys.executable, "-m", "rlx_gpu", "info"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and f"implementation in use: {IMPLEMENTATION}" in r.stdout
    assert f"{other_implementation} (probed in a child process)" in r.stdout


ALIASED = """
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@compute @workgroup_size(1) fn main() { b[0] = a[0] + 1.0; c[0] = 2.0; }
"""


@pytest.mark.gpu
def test_aliased_bindings_are_one_clear_error_on_both(device):
    """WebGPU forbids a buffer bound read-only and writable in one dispatch (wgpu-native: a bare "Validation
    Error") and two overlapping writable bindings (only Dawn refused them: StiefelSGD bound its one placeholder
    twice). Both are a ValueError naming the bindings before anything is submitted; disjoint writable ranges bind."""
    import numpy as np
    prog = rlx_gpu.Program(device, ALIASED, "main")
    x, y = device.buffer(1024, "x", data=np.zeros(256, np.float32)), device.buffer(1024, "y")
    for kw, how in (({"a": (x, 0, 16), "b": (x, 256, 16), "c": y}, "'a' and 'b' .*read-only and writable"),
                    ({"a": y, "b": (x, 0, 32), "c": (x, 16, 16)}, "'b' and 'c' .*overlapping ranges .*16..32")):
        with pytest.raises(ValueError, match=f"user:main: bindings {how}"):
            prog(1, **kw)
    assert not device.read(x).any()  # (nothing ran)
    prog(1, a=y, b=(x, 0, 16), c=(x, 256, 16))
    got = device.read(x).view(np.float32)
    assert got[0] == 1.0 and got[64] == 2.0


TOGGLE = """
import warnings, numpy as np, rlx_gpu
d = rlx_gpu.get_device()
o = rlx_gpu.AdamW({"w": np.ones(1000, np.float32)}, device=d); o.step({"w": np.full(1000, 0.5, np.float32)})
t = rlx_gpu.reference.AdamW({"w": np.ones(1000, np.float32)}); t.step({"w": np.full(1000, 0.5, np.float32)})
assert np.array_equal(o.params["w"].numpy(), t.params["w"])
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    rlx_gpu.Program(d, "@group(0) @binding(0) var<storage, read_write> x: array<f32>;"
                       "@compute @workgroup_size(1) fn main() { x[0] = 1.0; }", "main")
toggles = []
if d.implementation == "dawn":
    from wgpudawn.backends.dawn import extras
    toggles = extras.get_toggles(d.device)
print(%s, %r in toggles, any(%r in str(w.message) for w in seen))
"""
SKIP = TOGGLE % ("d.skip_validation", "skip_validation", "skip_validation")


@pytest.mark.gpu
@pytest.mark.parametrize("asked", ["0", "1"])
def test_skip_validation_only_when_asked_and_never_silently(asked):
    """RLX_GPU_DAWN_SKIP_VALIDATION=1 gives Dawn devices the skip_validation toggle (optimizers still step as their
    twins); a Program on such a device warns. Off by default, and nothing on wgpu-native."""
    r = py(SKIP, RLX_GPU_DAWN_SKIP_VALIDATION=asked)
    assert r.returncode == 0, r.stderr[-2000:]
    on = asked == "1" and IMPLEMENTATION == "dawn"
    assert r.stdout.split() == [str(on)] * 3


ROBUST = TOGGLE % ("not d.robustness", "disable_robustness", "robustness")


@pytest.mark.gpu
@pytest.mark.parametrize("asked", ["0", "1"])
def test_robustness_off_only_when_asked_and_never_silently(asked):
    """RLX_GPU_DAWN_DISABLE_ROBUSTNESS=1 gives Dawn devices the disable_robustness toggle (what the tensor-core GEMM
    runs fastest with; optimizers still step as their twins); a Program on such a device warns. Off by default, and
    nothing on wgpu-native."""
    r = py(ROBUST, RLX_GPU_DAWN_DISABLE_ROBUSTNESS=asked)
    assert r.returncode == 0, r.stderr[-2000:]
    on = asked == "1" and IMPLEMENTATION == "dawn"
    assert r.stdout.split() == [str(on)] * 3
