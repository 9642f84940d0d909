"""The tensor-core GEMM's test cases, run on a device in one mode ("emulated" in-process on llvmpipe by
tests/test_tc.py; "subgroup-matrix" in tests/tc_worker.py on Dawn): each returns a dict with the error against NumPy
float64 of the same float16 operands, relative to the largest entry of the reference."""
import numpy as np

from rlx_gpu.linalg import tc
from rlx_gpu.linalg.tcns import Job, ns_tc
from rlx_gpu.linalg.tcconfig import TcConfig
from rlx_gpu.reference.muon import newton_schulz_np


def _read(dev, buf, n, dtype):
    return dev.read(buf, 0, buf.size).view(dtype)[:n].astype(np.float64)


def gemm_case(dev, mode, M, N, K, batch=1, ta=False, tb=False, out="f32", d=False, alpha=1.0, beta=0.0,
              base=None, seed=0, config=None, sym=False):
    """C = alpha op(A) op(B) (+ beta D) for random float16 A, B (and D of C's dtype); ``base``: the fields of a
    TcConfig for :func:`~rlx_gpu.linalg.tc.choose_config`; ``config``: the exact TcConfig to run; ``sym``: op(B) =
    op(A)^T and D symmetric, so C is, and the kernel computes half its blocks (M = N)."""
    rng = np.random.default_rng([seed, M, N, K, batch])
    a = rng.standard_normal((batch, *((K, M) if ta else (M, K)))).astype(np.float16)
    b = rng.standard_normal((batch, *((N, K) if tb else (K, N)))).astype(np.float16)
    ot = np.float16 if out == "f16" else np.float32
    dd = rng.standard_normal((batch, M, N)).astype(ot)
    if sym:  # op(B) = op(A)^T: B is A itself (NT, TN) or its transpose (NN, TT)
        b = a if ta != tb else np.ascontiguousarray(np.swapaxes(a, -1, -2))
        dd = (dd + np.swapaxes(dd, -1, -2)).astype(ot)
    A, B = tc.as_f16_buffer(dev, a, "a"), tc.as_f16_buffer(dev, b, "b")
    C = dev.buffer(4 * (-(-batch * M * N * np.dtype(ot).itemsize // 4)), "c")
    D = None if not d else (tc.as_f16_buffer(dev, dd, "d") if out == "f16" else dev.buffer(dd.nbytes, "d", data=dd))
    cfg = config
    if base is not None:
        cfg = tc.choose_config(dev, mode, M, N, K, ta=ta, tb=tb, out=out, epi="d" if d else "none",
                               base=TcConfig(**base), sym=sym, alpha=alpha)
    enc, keep = dev.device.create_command_encoder(), []
    used = tc.tc_gemm(dev, enc, A, B, C, M, N, K, mode=mode, ta=ta, tb=tb, batch=batch, alpha=alpha, beta=beta, d=D,
                      out=out, config=cfg, keep=keep, sym=sym)
    dev.submit(enc)
    got = _read(dev, C, batch * M * N, ot).reshape(batch, M, N)
    opa = np.swapaxes(a, -1, -2) if ta else a
    opb = np.swapaxes(b, -1, -2) if tb else b
    ref = alpha * (opa.astype(np.float64) @ opb.astype(np.float64)) + (beta * dd.astype(np.float64) if d else 0.0)
    return {"config": used.name(), "rel_err": float(np.abs(got - ref).max() / np.abs(ref).max()), "out": out}


def grouped_case(dev, mode, shapes, out="f16", d=True, base=None, seed=0):
    """Several problems ((M, N, K, batch) each, NN) in one grouped dispatch, each at its own offsets of the same
    buffers, with its own alpha and beta: the largest of their errors."""
    rng = np.random.default_rng([seed, len(shapes)])
    ot = np.float16 if out == "f16" else np.float32
    at = [0, 0, 0]
    probs, mats = [], []
    for i, (M, N, K, batch) in enumerate(shapes):
        a, b = (rng.standard_normal((batch, *s)).astype(np.float16) for s in ((M, K), (K, N)))
        dd = rng.standard_normal((batch, M, N)).astype(ot)
        probs.append(tc.Problem(M, N, K, batch, 0.5 + i, 0.25 * i - 0.5 if d else 0.0, (at[0], at[1], at[2], at[2])))
        mats.append((a, b, dd, at[2]))
        at = [at[0] + -(-a.size // 8) * 8, at[1] + -(-b.size // 8) * 8, at[2] + -(-dd.size // 8) * 8]
    flat = [np.zeros(n, t) for n, t in zip(at, (np.float16, np.float16, ot))]
    for (a, b, dd, _), q in zip(mats, probs):
        flat[0][q.offsets[0]:q.offsets[0] + a.size] = a.ravel()
        flat[1][q.offsets[1]:q.offsets[1] + b.size] = b.ravel()
        flat[2][q.offsets[2]:q.offsets[2] + dd.size] = dd.ravel()
    A, B = tc.as_f16_buffer(dev, flat[0], "a"), tc.as_f16_buffer(dev, flat[1], "b")
    D = tc.as_f16_buffer(dev, flat[2], "d") if out == "f16" else dev.buffer(flat[2].nbytes, "d", data=flat[2])
    C = dev.buffer(max(16, flat[2].nbytes), "c")
    cfg = tc.choose_config(dev, mode, 0, 0, 0, out=out, epi="d" if d else "none", problems=probs,
                           base=TcConfig(**base) if base else None)
    enc, keep = dev.device.create_command_encoder(), []
    tc.tc_gemm_grouped(dev, enc, A, B, C, probs, mode=mode, d=D if d else None, out=out, config=cfg, keep=keep)
    dev.submit(enc)
    got = _read(dev, C, flat[2].size, ot)
    err = 0.0
    for (a, b, dd, off), q in zip(mats, probs):
        ref = q.alpha * (a.astype(np.float64) @ b) + q.beta * dd.astype(np.float64)
        g = got[off:off + dd.size].reshape(dd.shape)
        err = max(err, float(np.abs(g - ref).max() / np.abs(ref).max()))
    return {"config": cfg.name(), "rel_err": err, "out": out}


def ns_case(dev, mode, shape, seed=0, ns_steps=5, shapes=None):
    """Newton-Schulz in float16 on the tensor-core GEMM (a batch of ``shape`` = (batch, m, n), or of each of
    ``shapes`` at once, grouped) against the float32 iteration (the twin's oracle): the largest absolute difference
    (the entries are O(1))."""
    shapes = [tuple(shape)] if shapes is None else [tuple(s) for s in shapes]
    jobs, xs, bufs = [], [], []
    for sh in shapes:
        rng = np.random.default_rng([seed, *sh])
        x = rng.standard_normal(sh).astype(np.float32)
        buf = dev.buffer(x.nbytes, "ns.x", data=x)
        xs.append(x)
        bufs.append(buf)
        jobs.append(Job(buf, 0, *sh))
    enc, keep = dev.device.create_command_encoder(), []
    ns_tc(dev, enc, jobs, ns_steps, (3.4445, -4.775, 2.0315), 1e-7, keep, mode)
    dev.submit(enc)
    err = 0.0
    for x, buf in zip(xs, bufs):
        got = _read(dev, buf, x.size, np.float32).reshape(x.shape)
        ref = np.stack([newton_schulz_np(g, ns_steps) for g in x]).astype(np.float64)
        err = max(err, float(np.abs(got - ref).max()))
    return {"shape": list(shapes[0]) if len(shapes) == 1 else [list(s) for s in shapes], "abs_err": err}


# (M, N, K, batch, ta, tb, out, d, alpha, beta, base): every part of the generator at least once (edges, both
# transposes, f16 and f32 results, D at the end and at the start (f16 and f32), swizzle, one and two stages with and
# without prefetch, the four ways to stage, both epilogues, packed f16 stores, several scratch slots, symmetric
# results; the fifth: fragments straight from storage and into C)
GEMM_CASES = [
    dict(M=104, N=72, K=40, batch=3, ta=True, alpha=0.5),                       # vec8 with edges, TN
    dict(M=65, N=130, K=40, tb=True),                                           # vec8 with edges, NT
    dict(M=33, N=17, K=37, ta=True, tb=True, out="f16", d=True, alpha=0.5, beta=-2.0),  # f16 loads (unaligned)
    dict(M=128, N=192, K=96, batch=2, out="f16", d=True, alpha=1.5, beta=0.25,
         base=dict(tm=2, tn=2, stage="coop", smem="h4", slots=2, stages=2)),     # coop copies, h4, D at the start
    dict(M=128, N=128, K=64, base=dict(tm=2, tn=2, stage="direct", stages=1, swizzle=1, store="direct")),
    dict(M=192, N=128, K=64, batch=2, base=dict(wm=4, wn=2, tm=2, tn=1, stages=1, swizzle=2)),  # 8 subgroups
    dict(M=128, N=128, K=96, batch=2, d=True, alpha=2.0, beta=-0.5,
         base=dict(tm=2, tn=2, stages=1, prefetch=True, store="direct")),        # f32 D at the start, direct store
    dict(M=128, N=128, K=64, batch=2, tb=True, out="f16", d=True, alpha=0.5, beta=1.5, sym=True,
         base=dict(tm=2, tn=2, stages=1, slots=4)),                              # sym, cvec, 4 slots, f16 D start
    dict(M=96, N=96, K=40, ta=True, sym=True, alpha=0.25),                       # sym with edges, TN
]
GROUPED_CASES = [([(64, 128, 64, 2), (128, 64, 192, 1), (64, 64, 64, 3)], "f16"),
                 ([(64, 64, 128, 1), (128, 128, 64, 2)], "f32")]
NS_CASES = [(2, 64, 128), (2, 128, 64)]  # wide and tall
NS_GROUPED = [(2, 64, 128), (1, 128, 64), (3, 64, 64)]  # three shapes in one set of dispatches


class LimitsDevice:
    """What choose_config reads of a device: its workgroup-memory limit (and no features, so 32-lane subgroups)."""
    features: set = set()

    def __init__(self, limit: int = 49152):
        self.limits = {"max-compute-workgroup-storage-size": limit}


def case_configs(mode: str, limit: int = 49152) -> list:
    """The kernel configurations the cases above run in ``mode`` on a device with ``limit`` bytes of workgroup
    memory (what choose_config and ns_tc pick for them)."""
    from rlx_gpu.linalg import tcns
    dev, out = LimitsDevice(limit), []
    for c in GEMM_CASES:
        base = TcConfig(**c["base"]) if "base" in c else None
        probs = [tc.Problem(c["M"], c["N"], c["K"], c.get("batch", 1), c.get("alpha", 1.0))]  # (as tc_gemm)
        out.append(tc.choose_config(dev, mode, 0, 0, 0, ta=c.get("ta", False), tb=c.get("tb", False),
                                    out=c.get("out", "f32"), epi="d" if c.get("d") else "none", base=base,
                                    sym=c.get("sym", False), problems=probs))
    for shapes, o in GROUPED_CASES:
        probs = [tc.Problem(M, N, K, b) for M, N, K, b in shapes]
        out.append(tc.choose_config(dev, mode, 0, 0, 0, out=o, epi="d", problems=probs))
    for shapes in [[s] for s in NS_CASES] + [NS_GROUPED]:
        out += tcns.stage_configs(dev, [tcns.Job(None, 0, *s) for s in shapes], mode).values()
    return out
