"""Each pass of an optimizer's step timed alone (the engine's dispatch plan, entry by entry), after the redesign
(afprof.py is the pre-redesign version for Adafactor).
    python benchmarks/experiments/passprof.py OPTIMIZER SET..."""
import sys

import numpy as np

import rlx_gpu
from rlx_gpu.tools.bench import OPTIMIZERS, Timer, param_set
from rlx_gpu.runtime.kernels import ComputePass

dev = rlx_gpu.get_device()
timer = Timer(dev)
cls_name, kw = OPTIMIZERS[sys.argv[1]][:2]
for sname in sys.argv[2:]:
    shapes = param_set(sname)
    params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}
    o = getattr(rlx_gpu, cls_name)(params, device=dev, **kw)
    for n, s in shapes:
        o.grads[n].write(np.full(s, 1e-3, np.float32))
    for _ in range(3):
        o.step()
    t, _ = timer.measure(o.step, 20, 5)
    print(f"{sys.argv[1]} {sname}: whole step {t * 1e3:.3f} ms", flush=True)
    entries = {}
    for k, bind, n in o._binds["plan"]:
        entries.setdefault(k.entry, []).append((k, bind, n))

    def one(plan):
        def f():
            enc = dev.device.create_command_encoder()
            cp = ComputePass(enc)
            for k, bind, n in plan:
                k.dispatch(cp, bind, n)
            cp.end()
            dev.submit(enc)
        return f
    for e, plan in entries.items():
        t, _ = timer.measure(one(plan), 20, 5)
        print(f"  {e}: {t * 1e3:.3f} ms ({sum(n for *_, n in plan)} workgroups)", flush=True)
    del o
