"""The in-process WGSL validators, run by ``rlx-gpu check-shaders`` in a child process (``python -m
rlx_gpu.tools.check.validate wgpu|tint``): a native compiler that crashes or hangs on a file (naga overflows its stack on a
10 KB shader of nested parentheses) must not take the caller down, and must not hide the other files' results.

Input on stdin: one JSON object ``{"device": selector or null, "jobs": [{"label", "code", "entries", "constants",
"layouts": {entry: [[binding, read_only], ...]}}, ...]}`` (each entry point's layout: the bindings it uses, as the
runtime gives it). Output on stdout, one JSON line each: first ``{"ready": true}`` or ``{"unavailable": why}``,
then ``{"label", "errors": [message, ...]}`` per job as soon as it is done, so the parent knows which file a crash
or a hang happened on.

wgpu: naga inside wgpu-native (whichever implementation the calling process runs on), a module and a compute
pipeline per entry point on the selected adapter, with the runtime's layout (every storage binding of the file).
tint: Dawn's Tint through its Null backend (``WGPU_BACKEND_TYPE=Null``, set before ``wgpudawn`` is imported), at
WebGPU's default limits (8 storage buffers per stage, 256 invocations per workgroup): what a shader may assume on
every adapter.
"""
import json
import os
import sys


def _open(validator: str, selector):
    from rlx_gpu.runtime import implementation
    from rlx_gpu.runtime.discovery import runtime_dir
    runtime_dir()
    if validator == "tint":
        os.environ["WGPU_BACKEND_TYPE"] = "Null"
        wgpu = implementation.load("dawn")
        adapter = wgpu.gpu.request_adapter_sync()
        feats = [f for f in ("shader-f16",) if f in adapter.features]
        return wgpu, adapter.request_device_sync(required_features=feats)
    # "wgpu" is naga inside wgpu-native, whichever implementation the parent process runs on
    implementation.set_implementation("wgpu-native")
    from rlx_gpu.runtime.device import get_device
    return implementation.wgpu(), get_device(selector).device


def _check(wgpu, device, job) -> list:
    errors = []
    try:
        module = device.create_shader_module(code=job["code"], label=job["label"])
        for e in job["entries"]:
            try:
                bgl = device.create_bind_group_layout(entries=[
                    {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                     "buffer": {"type": "read-only-storage" if ro else "storage"}} for i, ro in job["layouts"][e]])
                layout = device.create_pipeline_layout(bind_group_layouts=[bgl])
                device.create_compute_pipeline(layout=layout, label=f"{job['label']}:{e}", compute={
                    "module": module, "entry_point": e, "constants": job["constants"]})
            except Exception as ex:  # a pipeline error (overrides, limits) for this entry point
                errors.append(f"entry point {e!r}: {ex}")
    except Exception as ex:
        errors.append(str(ex))
    return errors


def main() -> int:
    validator = sys.argv[1]
    request = json.loads(sys.stdin.read())
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # native libraries print notices on stdout; keep ours for the JSON lines

    def say(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    try:
        wgpu, device = _open(validator, request.get("device"))
    except Exception as e:
        say({"unavailable": f"{type(e).__name__}: {e}".strip().splitlines()[0]})
        return 0
    say({"ready": True})
    for job in request["jobs"]:
        say({"label": job["label"], "errors": _check(wgpu, device, job)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
