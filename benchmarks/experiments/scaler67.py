import sys, time, numpy as np, rlx_gpu
from rlx_gpu.tools.bench import Timer
dev = rlx_gpu.get_device(); timer = Timer(dev)
n = int(sys.argv[1])
params = {"w": np.full(n, 0.01, np.float32)}
def run(label, opt, fn):
    opt.grads["w"].write(np.full(n, 1e-3, np.float32))
    for _ in range(5): fn()
    dev.sync(); t0 = time.perf_counter()
    for _ in range(30): fn()
    issue = (time.perf_counter() - t0) / 30
    t, w = timer.measure(fn, 30, 5)
    print(f"{label}: gpu {t*1e3:.3f} ms, wall {w*1e3:.3f} ms, host issue {issue*1e3:.3f} ms/step", flush=True)
for order in range(2):
    a = rlx_gpu.AdamW(params, device=dev); run("adamw", a, a.step); del a
    b = rlx_gpu.AdamW(params, device=dev, skip_nonfinite=True); run("skip_nonfinite", b, b.step); del b
    c = rlx_gpu.AdamW(params, device=dev); sc = rlx_gpu.GradScaler()
    def f(): sc.step(c); sc.update()
    run("scaler", c, f); del c
