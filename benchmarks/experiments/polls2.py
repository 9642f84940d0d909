import os, sys, time, numpy as np, rlx_gpu
from rlx_gpu.tools.bench import Timer, param_set, host_path
dev = rlx_gpu.get_device(); timer = Timer(dev)
poller = dev.device._poller
ours = poller._poll_func                   # rlx_gpu's non-blocking poll (device._poll_without_blocking)
blocking = ours._rlx_original              # wgpu-py's own
modes = {"blocking": blocking, "nonblocking": ours}  # PERF_NOTES 26 also measured a growing-gap poll, since removed
tid = poller.native_id; hz = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / hz
for sname in sys.argv[1:]:
    shapes = param_set(sname)
    params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}
    o = rlx_gpu.AdamW(params, device=dev); del params
    sc = rlx_gpu.GradScaler()
    for n, s in shapes: o.grads[n].write(np.full(s, 1e-3, np.float32))
    def f(): sc.step(o); sc.update()
    for rep in range(2):
        for m, fn in modes.items():
            poller._poll_func = fn
            for _ in range(3): f()
            dev.sync()
            c0, w0 = cpu(), time.perf_counter()
            t, w = timer.measure(f, 100, 5)
            c1, w1 = cpu(), time.perf_counter()
            hp = host_path(dev, o, shapes, timer)
            print(f"{sname} {m}: scaler step gpu {t*1e3:.3f} ms wall {w*1e3:.3f}; poll thread {100*(c1-c0)/(w1-w0):.0f}% of a core; up {hp['upload_gbps']:.1f} down {hp['download_gbps']:.1f} reuse {hp['download_reuse_gbps']:.1f} GB/s host step {hp['host_step_ms']:.1f} ms", flush=True)
    poller._poll_func = ours
    del o
