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
    device = adapter.request_device_sync(
        required_limits={k: adapter.limits[k] for k in ("max-storage-buffers-per-shader-stage",
                                                         "max-compute-invocations-per-workgroup",
                                                         "max-compute-workgroup-size-x")})
    out = []
    for job in jobs:
        errors = []
        try:
            module = device.create_shader_module(code=job["code"], label=job["label"])
            for e in job["entries"]:
                try:
                    device.create_compute_pipeline(layout="auto", label=f"{job['label']}:{e}", compute={
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
