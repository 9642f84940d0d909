"""Child process of tests/test_tc.py: the subgroup-matrix GEMM on Dawn (wgpudawn), whichever implementation the
test suite runs on.

    python tests/tc_worker.py compile < configs.json   # Tint on Dawn's Null backend (a device made here): one JSON
                                                        # line per config
    python tests/tc_worker.py run < cases.json          # the package's Dawn device (rlx_gpu.set_implementation):
                                                        # the GEMM and Newton-Schulz cases against NumPy float64
Output: JSON lines; ``{"unavailable": why}`` where Dawn or the feature is missing."""
import json
import os
import sys


FEATURES = ("chromium-experimental-subgroup-matrix", "subgroups", "shader-f16", "timestamp-query")


def say(**kw):
    print(json.dumps(kw), flush=True)


def dawn_device(backend: str):
    """(wgpu module, adapter, device) of Dawn on ``backend`` ("Null" or "Vulkan") with the toggles subgroup matrices
    need (allow_unsafe_apis: experimental features; vulkan_enable_f16_on_nvidia: f16 on NVIDIA)."""
    if backend == "Null":
        os.environ["WGPU_BACKEND_TYPE"] = "Null"
    import wgpudawn
    wgpudawn.install_as_wgpu()
    import wgpu
    from wgpudawn.backends.dawn import extras
    extras.set_instance_extras(backends=["Vulkan"] if backend == "Vulkan" else ["All"],
                               enable_toggles=["allow_unsafe_apis", "vulkan_enable_f16_on_nvidia"])
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    lim = adapter.limits
    keys = ("max-storage-buffer-binding-size", "max-buffer-size", "max-compute-workgroup-storage-size",
            "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x")
    device = adapter.request_device_sync(required_features=[f for f in FEATURES if f in adapter.features],
                                         required_limits={k: lim[k] for k in keys if k in lim})
    return wgpu, adapter, device


def compile_configs():
    """Each config (TcConfig fields as JSON) compiled by Tint: the module (every rule of WGSL, uniformity included),
    and the pipeline where the Null adapter's limits allow it (16 KiB of workgroup memory; a subgroup-matrix
    workgroup a multiple of its 128-lane subgroups)."""
    from rlx_gpu.linalg.tcconfig import TcConfig
    from rlx_gpu.linalg.tcgen import ENTRY, generate
    _, adapter, device = dawn_device("Null")
    limit = device.limits["max-compute-workgroup-storage-size"]
    for fields in json.loads(sys.stdin.read()):
        cfg = TcConfig(**fields)
        src, out = generate(cfg), {"name": cfg.name(), "mode": cfg.mode}
        try:
            module = device.create_shader_module(code=src)
            out["warnings"] = [m.message for m in module.get_compilation_info_sync().messages]
            if cfg.smem_bytes() <= limit and (cfg.mode == "emulated" or cfg.threads % 128 == 0):
                device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": ENTRY})
                out["pipeline"] = True
        except Exception as e:  # the compiler's message, whole
            out["error"] = str(e)
        say(**out)


def run_gemms():
    import rlx_gpu
    from rlx_gpu.linalg import tc
    rlx_gpu.set_implementation("dawn")
    try:
        dev = rlx_gpu.get_device()
    except Exception as e:  # no adapter for Dawn
        say(unavailable=f"Dawn found no adapter: {type(e).__name__}: {e}")
        return
    if tc.subgroup_matrix_size(dev) is None:
        say(unavailable=f"{dev.name}: no f16 16x16x16 subgroup-matrix config with f32 results "
                        f"(features: {sorted(f for f in dev.features if 'subgroup' in f)})")
        return
    say(adapter=dev.name, configs=tc.subgroup_matrix_configs(dev), robustness=dev.robustness)
    from tc_cases import gemm_case, grouped_case, ns_case
    for case in json.loads(sys.stdin.read() or "[]"):
        if "ns" in case:
            say(**ns_case(dev, "subgroup-matrix", **case["ns"]))
        elif "grouped" in case:
            say(**grouped_case(dev, "subgroup-matrix", *case["grouped"]))
        else:
            say(**gemm_case(dev, "subgroup-matrix", **case))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        {"compile": compile_configs, "run": run_gemms}[sys.argv[1]]()
    except ImportError as e:
        say(unavailable=f"{type(e).__name__}: {e}")
