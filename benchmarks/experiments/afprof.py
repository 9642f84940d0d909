import sys, numpy as np, rlx_gpu
from rlx_gpu.tools.bench import Timer, param_set
from rlx_gpu.kernels import ComputePass
dev = rlx_gpu.get_device(); timer = Timer(dev)
for sname in sys.argv[1:]:
    shapes = param_set(sname)
    params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}
    o = rlx_gpu.Adafactor(params, device=dev)
    for n, s in shapes: o.grads[n].write(np.full(s, 1e-3, np.float32))
    for _ in range(3): o.step()
    t, _ = timer.measure(o.step, 20, 5)
    print(f"{sname}: whole step {t*1e3:.3f} ms; counts {o._counts}", flush=True)
    k = o._kernels
    def one(e):
        def f():
            enc = dev.device.create_command_encoder(); cp = ComputePass(enc)
            if e in ("stats", "update_norm", "apply"):
                for c, b in enumerate(o.layout.blocks): k[e].dispatch(cp, o._bind(e, c), len(b))
            elif e == "rows":
                for c, (nr, nc, _) in enumerate(o._counts): k[e].dispatch(cp, o._bind(e, c), nr)
            elif e == "cols":
                for c, (nr, nc, _) in enumerate(o._counts): k[e].dispatch(cp, o._bind(e, c), nc)
            elif e == "finish": k[e].dispatch(cp, o._bind(e, 0), o._counts[0][2])
            elif e == "ratio": k[e].dispatch(cp, o._bind(e, 0), len(o._names))
            cp.end(); dev.submit(enc)
        return f
    for e in o.entries:
        t, _ = timer.measure(one(e), 20, 5)
        print(f"  {e}: {t*1e3:.3f} ms", flush=True)
    del o
