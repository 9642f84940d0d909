import os, time, threading, numpy as np, rlx_gpu
dev = rlx_gpu.get_device()
import sys
N, S = int(sys.argv[1]), int(sys.argv[2])
o = rlx_gpu.AdamW({"w": np.full(N, 0.01, np.float32)}, device=dev)
o.step(); dev.sync()
poller = dev.device._poller
tid = poller.native_id
hz = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / hz
for mode in ("nonblocking", "blocking"):
    if mode == "blocking":
        poller._poll_func = poller._poll_func._rlx_original
    buf = dev.device.create_buffer(size=16, usage=dev.wgpu.BufferUsage.MAP_READ | dev.wgpu.BufferUsage.COPY_DST)
    for _ in range(S): o.step()
    enc = dev.device.create_command_encoder(); enc.copy_buffer_to_buffer(o._hyper, 0, buf, 0, 16); dev.submit(enc)
    c0, t0 = cpu(), time.perf_counter()
    p = buf.map_async("READ_NOSYNC", 0, 16); p.sync_wait()
    c1, t1 = cpu(), time.perf_counter()
    print(f"{mode}: waited {t1-t0:.2f} s, poll thread CPU {c1-c0:.3f} s ({100*(c1-c0)/(t1-t0):.1f}% of a core)")
    buf.unmap()
