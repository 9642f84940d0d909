"""Tint (Dawn's WGSL compiler) as a validator, run by ``rlx-gpu check-shaders`` in a child process.

Dawn's Null backend (``WGPU_BACKEND_TYPE=Null``, set before ``wgpudawn`` is imported) runs Tint's full WGSL
validation with no GPU. It runs in its own process because wgpu-py reads the same environment variable and
because a crash in a native compiler must not take the caller down. Input on stdin: a JSON list of
``{"label", "code", "entries", "constants"}``; output on stdout: one JSON line, a list of
``{"label", "errors": [message, ...]}``.
"""
import json
import os
import sys


def main() -> int:
    os.environ["WGPU_BACKEND_TYPE"] = "Null"
    jobs = json.loads(sys.stdin.read())
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # Dawn prints notices on stdout; keep our stdout for the JSON answer
    import wgpudawn as wgpu

    adapter = wgpu.gpu.request_adapter_sync()
    # WebGPU's default limits: what a shader may assume on every adapter (8 storage buffers per stage,
    # 256 invocations per workgroup).
    device = adapter.request_device_sync()
    out = []
    for job in jobs:
        errors = []
        try:
            module = device.create_shader_module(code=job["code"], label=job["label"])
            # The runtime's layout: every storage binding of the file for every entry point (so a file that
            # needs more storage buffers than WebGPU's default 8 per stage fails here, as it would there).
            bgl = device.create_bind_group_layout(entries=[
                {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                 "buffer": {"type": "read-only-storage" if ro else "storage"}} for i, ro in job["bindings"]])
            layout = device.create_pipeline_layout(bind_group_layouts=[bgl])
            for e in job["entries"]:
                try:
                    device.create_compute_pipeline(layout=layout, label=f"{job['label']}:{e}", compute={
                        "module": module, "entry_point": e, "constants": job["constants"]})
                except Exception as ex:  # a pipeline error (overrides, limits) for this entry point
                    errors.append(f"entry point {e!r}: {ex}")
        except Exception as ex:
            errors.append(str(ex))
        out.append({"label": job["label"], "errors": errors})
    os.write(real_stdout, (json.dumps(out) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
