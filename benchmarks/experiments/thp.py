import mmap, time, sys, numpy as np, rlx_gpu
from rlx_gpu.tools.bench import param_set
print(open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip(), open("/sys/kernel/mm/transparent_hugepage/defrag").read().strip())
dev = rlx_gpu.get_device()
def alloc_np(n): return np.empty(n, np.float32)
def alloc_thp(n):
    nb = n * 4
    if nb < (4 << 20): return np.empty(n, np.float32)
    m = mmap.mmap(-1, nb, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(m, np.float32, n)
def alloc_populate(n):
    nb = n * 4
    if nb < (4 << 20): return np.empty(n, np.float32)
    m = mmap.mmap(-1, nb, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    try: m.madvise(23)  # MADV_POPULATE_WRITE
    except OSError as e: pass
    return np.frombuffer(m, np.float32, n)
for sname in sys.argv[1:]:
    shapes = param_set(sname)
    params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}
    o = rlx_gpu.AdamW(params, device=dev); del params
    nbytes = 4 * sum(int(np.prod(s)) for _, s in shapes)
    idx = list(range(len(shapes)))
    reuse = [alloc_np(o.layout.sizes[t]) for t in idx]
    for name, alloc in [("np.empty", alloc_np), ("mmap+THP", alloc_thp), ("mmap+THP+populate", alloc_populate), ("reused", None), ("np.empty", alloc_np), ("mmap+THP", alloc_thp)]:
        ts = []
        for r in range(5):
            dev.sync(); t0 = time.perf_counter()
            outs = reuse if alloc is None else [alloc(o.layout.sizes[t]) for t in idx]
            o._param.read_many(idx, outs)
            ts.append(time.perf_counter() - t0); del outs
        print(f"{sname} {name}: {nbytes/np.median(ts)/1e9:.1f} GB/s", flush=True)
    del o
