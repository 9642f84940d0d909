"""The tensor-core GEMM's test cases, run on a device in one mode ("emulated" in-process on llvmpipe by
tests/test_tc.py; "subgroup-matrix" in tests/tc_worker.py on Dawn): each returns a dict with the error against NumPy
float64 of the same float16 operands, relative to the largest entry of the reference."""
import numpy as np

from rlx_gpu.linalg import tc
from rlx_gpu.linalg.record import ns_encode16
from rlx_gpu.linalg.tcconfig import TcConfig
from rlx_gpu.reference.muon import newton_schulz_np


def _read(dev, buf, n, dtype):
    return dev.read(buf, 0, buf.size).view(dtype)[:n].astype(np.float64)


def gemm_case(dev, mode, M, N, K, batch=1, ta=False, tb=False, out="f32", d=False, alpha=1.0, beta=0.0,
              base=None, seed=0, config=None):
    """C = alpha op(A) op(B) (+ beta D) for random float16 A, B (and D of C's dtype); ``base``: the fields of a
    TcConfig for :func:`~rlx_gpu.linalg.tc.choose_config`; ``config``: the exact TcConfig to run."""
    rng = np.random.default_rng([seed, M, N, K, batch])
    a = rng.standard_normal((batch, *((K, M) if ta else (M, K)))).astype(np.float16)
    b = rng.standard_normal((batch, *((N, K) if tb else (K, N)))).astype(np.float16)
    ot = np.float16 if out == "f16" else np.float32
    dd = rng.standard_normal((batch, M, N)).astype(ot)
    A, B = tc.as_f16_buffer(dev, a, "a"), tc.as_f16_buffer(dev, b, "b")
    C = dev.buffer(4 * (-(-batch * M * N * np.dtype(ot).itemsize // 4)), "c")
    D = None if not d else (tc.as_f16_buffer(dev, dd, "d") if out == "f16" else dev.buffer(dd.nbytes, "d", data=dd))
    cfg = config
    if base is not None:
        cfg = tc.choose_config(dev, mode, M, N, K, ta=ta, tb=tb, out=out, epi="d" if d else "none",
                               base=TcConfig(**base))
    enc, keep = dev.device.create_command_encoder(), []
    used = tc.tc_gemm(dev, enc, A, B, C, M, N, K, mode=mode, ta=ta, tb=tb, batch=batch, alpha=alpha, beta=beta, d=D,
                      out=out, config=cfg, keep=keep)
    dev.submit(enc)
    got = _read(dev, C, batch * M * N, ot).reshape(batch, M, N)
    opa = np.swapaxes(a, -1, -2) if ta else a
    opb = np.swapaxes(b, -1, -2) if tb else b
    ref = alpha * (opa.astype(np.float64) @ opb.astype(np.float64)) + (beta * dd.astype(np.float64) if d else 0.0)
    return {"config": used.name(), "rel_err": float(np.abs(got - ref).max() / np.abs(ref).max()), "out": out}


def ns_case(dev, mode, shape, seed=0, ns_steps=5):
    """Newton-Schulz in float16 on the tensor-core GEMM (a batch of ``shape`` = (batch, m, n)) against the
    float32 iteration (the twin's oracle): the largest absolute difference (the entries are O(1))."""
    rng = np.random.default_rng([seed, *shape])
    x = rng.standard_normal(shape).astype(np.float32)
    buf = dev.buffer(x.nbytes, "ns.x", data=x)
    enc, keep = dev.device.create_command_encoder(), []
    batch, m, n = shape
    ns_encode16(dev, enc, buf, 0, batch, m, n, ns_steps, (3.4445, -4.775, 2.0315), 1e-7, keep,
                mm=tc.tc_mm(dev, mode, batch, keep))
    dev.submit(enc)
    got = _read(dev, buf, x.size, np.float32).reshape(shape)
    ref = np.stack([newton_schulz_np(g, ns_steps) for g in x]).astype(np.float64)
    return {"shape": list(shape), "abs_err": float(np.abs(got - ref).max())}


# (M, N, K, batch, ta, tb, out, d, alpha, beta, base): every part of the generator at least once (edges, both
# transposes, f16 and f32 results, D, swizzle, one and two stages, the four ways to stage, both epilogues; the
# fifth: fragments straight from storage and into C)
GEMM_CASES = [
    dict(M=104, N=72, K=40, batch=3, ta=True, alpha=0.5),                       # vec8 with edges, TN
    dict(M=65, N=130, K=40, tb=True),                                           # vec8 with edges, NT
    dict(M=33, N=17, K=37, ta=True, tb=True, out="f16", d=True, alpha=0.5, beta=-2.0),  # f16 loads (unaligned)
    dict(M=128, N=192, K=96, batch=2, out="f16", d=True, alpha=1.5, beta=0.25,
         base=dict(tm=2, tn=2, stage="coop", smem="h4", slots=2)),               # coop copies, h4, two slots
    dict(M=128, N=128, K=64, base=dict(tm=2, tn=2, stage="direct", stages=1, swizzle=1, store="direct")),
    dict(M=192, N=128, K=64, batch=2, base=dict(wm=4, wn=2, tm=2, tn=1, stages=1, swizzle=2)),  # 8 subgroups
]
NS_CASES = [(2, 64, 128), (2, 128, 64)]  # wide and tall (three kernels between them: llvmpipe compiles slowly)
