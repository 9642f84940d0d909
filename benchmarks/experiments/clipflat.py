import sys, numpy as np, rlx_gpu
from rlx_gpu.tools.bench import Timer, param_set
dev = rlx_gpu.get_device(); timer = Timer(dev)
for sname in sys.argv[1:]:
    shapes = param_set(sname)
    numel = sum(int(np.prod(s)) for _, s in shapes)
    params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}
    base = None
    for wgs, u in [(None, 0), (264, 8), (528, 8), (1056, 8), (2112, 8), (4224, 8), (1056, 4), (2112, 4), (1056, 16), (528, 16), (100000, 8)]:
        cls = type("AdamW", (rlx_gpu.AdamW,), {"CLIP_FLAT_WGS": wgs or 1024, "CLIP_FLAT_U": u or 8})
        o = cls(params, clip_grad_norm=1.0, device=dev)
        for n, s in shapes: o.grads[n].write(np.full(s, 1e-3, np.float32))
        for _ in range(3): o.step()
        def clip_only():
            enc = dev.device.create_command_encoder(); o._encode_clip(enc, False, flat=wgs is not None); dev.submit(enc)
        tc, _ = timer.measure(clip_only, 30, 5)
        if base is None:
            t, _ = timer.measure(o.step, 20, 5)
            o2 = rlx_gpu.AdamW(params, device=dev)
            t0, _ = timer.measure(o2.step, 20, 5); del o2
            print(f"{sname}: adamw {t0*1e3:.3f} ms, adamw+clip(flat) {t*1e3:.3f} ms", flush=True)
            base = 1
        print(sname, "partial" if wgs is None else f"flat wgs={wgs} U={u}", f"clip pass {tc*1e3:.3f} ms = {4*numel/tc/1e9:.0f} GB/s", flush=True)
        del o
