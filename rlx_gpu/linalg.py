"""Matrix algebra on the GPU: a batched, tiled GEMM (``shaders/gemm.wgsl``) and Newton-Schulz orthogonalisation
(Muon's ``zeropower``), for NumPy arrays or :class:`~rlx_gpu.DeviceTensor`\\ s (the result is of the kind given).

    matmul(a, b, transpose_a=False, transpose_b=False)   a @ b, batched over a leading dimension
    newton_schulz_orth(x, ns_steps=5, ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7)
    cholesky_qr(x)                                        the Q of a tall matrix's QR (R's diagonal positive)

float32 throughout (the f16 path of the matrix-optimizer issue is not built yet). Sums run in another order than
NumPy's: results agree to float32 rounding over K terms (tests/test_linalg.py states the tolerances).
"""
from __future__ import annotations

import numpy as np

from .core.lowp import F32
from .runtime.arena import Arena, DeviceTensor
from .runtime.device import get_device
from .runtime.kernels import shipped_kernel
from .runtime.layout import Layout

__all__ = ["matmul", "newton_schulz_orth", "cholesky_qr", "NS_COEFFICIENTS"]

NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)
TILE = 128  # outputs per workgroup along m and n (shaders/gemm.wgsl)


def _bits(x: float) -> int:
    return int(np.array(x, np.float32).view(np.uint32))


def _prm(dev, words, label, keep, cache):
    """A parameter buffer holding ``words`` (from ``cache`` when the same words were made before: an optimizer that
    runs the same GEMMs every step makes them once)."""
    prm = np.array(words, np.uint32)
    key = (label, prm.tobytes())
    if cache is not None and key in cache:
        return cache[key]
    buf = dev.buffer(prm.nbytes, label, data=prm)
    if cache is not None:
        cache[key] = buf
    if keep is not None:
        keep.append(buf)
    return buf


def _bind(k, cache, buffers: dict):
    """A bind group; kept by the kernel when the caller keeps a ``cache`` (work recorded every step), made afresh
    otherwise (one-off calls with buffers of their own, which a kept group would hold alive)."""
    return k.cached_bind(buffers) if cache is not None else k.bind(buffers)


def gemm(dev, enc, a, b, c, M, N, K, *, ta=False, tb=False, offsets=(0, 0, 0), strides=None, alpha=1.0, beta=0.0,
         batch=1, keep=None, cache=None) -> None:
    """Record C = alpha * op(A) @ op(B) + beta * C for ``batch`` matrices (buffers ``a``, ``b``, ``c``; element
    offsets and batch strides; ``c`` must not be ``a`` or ``b``). ``keep``: a list that holds the parameter buffer
    until the work is submitted."""
    strides = strides or (M * K, K * N, M * N)
    tn, tm = -(-N // TILE), -(-M // TILE)
    pbuf = _prm(dev, [M, N, K, int(ta), int(tb), *offsets, *strides, _bits(alpha), _bits(beta), tn, tm, batch],
                "gemm.prm", keep, cache)
    k = shipped_kernel(dev, "gemm.wgsl", "gemm")
    k.dispatch(enc, _bind(k, cache, {"A": a, "B": b, "C": c, "prm": pbuf}), tn * tm * batch)


def copy_range(dev, enc, src, src_off, dst, dst_off, count, keep=None, cache=None) -> None:
    """Record a copy of ``count`` float32 elements as a dispatch (so it can sit inside a compute pass)."""
    pbuf = _prm(dev, [count, src_off, dst_off], "copy.prm", keep, cache)
    k = shipped_kernel(dev, "gemm.wgsl", "copy_range")
    k.dispatch(enc, _bind(k, cache, {"A": src, "C": dst, "prm": pbuf}), -(-count // 256))


def frob_scale(dev, enc, x, count, offset, stride, eps, batch, keep=None, cache=None) -> None:
    """Record: each of ``batch`` matrices of ``count`` elements divided by max(its Frobenius norm, eps)."""
    pbuf = _prm(dev, [count, offset, stride, _bits(eps), batch], "frob.prm", keep, cache)
    k = shipped_kernel(dev, "gemm.wgsl", "frob_scale")
    k.dispatch(enc, _bind(k, cache, {"C": x, "prm": pbuf}), batch)


def ns_dispatches(ns_steps: int) -> int:
    return 1 + 5 * ns_steps + 1


def ns_encode(dev, enc, x, offset, batch, m, n, ns_steps, coeffs, eps, keep, cache=None, capacity=None) -> None:
    """Record Newton-Schulz on ``batch`` (m, n) matrices at element ``offset`` of buffer ``x``, in place, as
    dispatches only (``enc``: a command encoder or a :class:`~rlx_gpu.runtime.kernels.ComputePass`):
    X /= max(|X|, eps); then ns_steps times A = X X^T, B = b A + c A A, X = a X + B X (for m > n on X^T, as
    X^T X and X B: torch.optim.Muon's _zeropower_via_newtonschulz, in float32). ``cache``: a dict kept by the caller
    from step to step, so the work buffers (sized for ``capacity`` matrices: the most a caller batches) and the
    parameter buffers are made once."""
    a, b, c = (float(v) for v in coeffs)
    s = min(m, n)
    tall = m > n
    size = batch * m * n
    cap = max(batch, capacity or batch)
    work = cache.get(("ns", m, n)) if cache is not None else None
    if work is None or work[0].size < 4 * batch * s * s:
        work = (dev.buffer(4 * cap * s * s, "ns.A"), dev.buffer(4 * cap * s * s, "ns.B"), dev.buffer(4 * cap * m * n,
                                                                                                  "ns.Y"))
        if cache is not None:
            cache[("ns", m, n)] = work
    amat, bmat, y = work
    keep += list(work)
    frob_scale(dev, enc, x, m * n, offset, m * n, eps, batch, keep, cache)
    cur, cur_off, other = x, offset, y
    for _ in range(ns_steps):
        # A = X X^T (s x s): wide: (m,n)(n,m); tall: X^T X = (n,m)(m,n)
        gemm(dev, enc, cur, cur, amat, s, s, m if tall else n, ta=tall, tb=not tall, offsets=(cur_off, cur_off, 0),
             strides=(m * n, m * n, s * s), batch=batch, keep=keep, cache=cache)
        copy_range(dev, enc, amat, 0, bmat, 0, batch * s * s, keep, cache)
        gemm(dev, enc, amat, amat, bmat, s, s, s, alpha=c, beta=b, batch=batch, keep=keep, cache=cache)  # B = cAA + bA
        o_off = 0 if other is y else offset
        copy_range(dev, enc, cur, cur_off, other, o_off, size, keep, cache)
        if tall:  # X = a X + X B   (B symmetric)
            gemm(dev, enc, cur, bmat, other, m, n, n, offsets=(cur_off, 0, o_off), strides=(m * n, s * s, m * n),
                 alpha=1.0, beta=a, batch=batch, keep=keep, cache=cache)
        else:  # X = a X + B X
            gemm(dev, enc, bmat, cur, other, m, n, m, offsets=(0, cur_off, o_off), strides=(s * s, m * n, m * n),
                 alpha=1.0, beta=a, batch=batch, keep=keep, cache=cache)
        cur, cur_off, other = other, o_off, cur
    if cur is not x:  # (an odd number of steps ended in the scratch buffer)
        copy_range(dev, enc, cur, 0, x, offset, size, keep, cache)


def cholesky_qr_encode(dev, enc, y, z, small, n, p, batch, keep, cache=None) -> None:
    """Record, in place in buffer ``y``, the Q of each of ``batch`` (n, p) matrices (n >= p) with R's diagonal
    positive: Cholesky-QR twice (G = Y^T Y by GEMM, G's Cholesky factor L in one workgroup per matrix, Q = Y L^-T a
    row a thread: ``shaders/cholqr.wgsl``). ``z`` (batch*n*p floats) and ``small`` (batch*p*p) are work buffers.
    float32; accurate while Y is well conditioned (kappa(Y)^2 well below 1/eps, as X + a step on the Stiefel
    manifold is), the second pass restoring orthogonality to float32 rounding."""
    prm = _prm(dev, [n, p, batch, 0, 0, 0, 0, 0], "cholqr.prm", keep, cache)
    kc, kt = shipped_kernel(dev, "cholqr.wgsl", "chol"), shipped_kernel(dev, "cholqr.wgsl", "trsm")
    for src, dst in ((y, z), (z, y)):
        gemm(dev, enc, src, src, small, p, p, n, ta=True, strides=(n * p, n * p, p * p), batch=batch, keep=keep,
             cache=cache)
        kc.dispatch(enc, _bind(kc, cache, {"small": small, "prm": prm}), batch)
        kt.dispatch(enc, _bind(kt, cache, {"ya": src, "qa": dst, "small": small, "prm": prm}), -(-batch * n // 256))


def _standalone(dev, shape, label) -> DeviceTensor:
    n = int(np.prod(shape))
    lay = Layout([n], alignment=dev.alignment, max_binding=dev.max_storage_binding, block=4)
    if len(lay.pieces[0]) != 1:
        raise ValueError(f"rlx_gpu.linalg: a result of {n} elements does not fit one storage binding")
    return DeviceTensor(Arena(dev, lay, label, F32), 0, label, tuple(shape))


def _operand(x, name, dev):
    """(buffer, element offset, shape, device) of a NumPy array (uploaded) or a float32 DeviceTensor."""
    if isinstance(x, DeviceTensor):
        if x.dtype != np.float32:
            raise TypeError(f"rlx_gpu.linalg: {name} is a DeviceTensor of {x.dtype}, expected float32")
        r = x.binding()
        return r["buffer"], r["offset"] // 4, x.shape, x.device
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError(f"rlx_gpu.linalg: {name} must be a float32 NumPy array or DeviceTensor, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    dev = dev or get_device(None)
    return dev.buffer(max(4, x.nbytes), f"linalg.{name}", data=np.ascontiguousarray(x)), 0, x.shape, dev


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False, device=None):
    """``op(a) @ op(b)`` for 2-D operands or batches of equal size (3-D); NumPy in, NumPy out; DeviceTensors in,
    a DeviceTensor out (on their device)."""
    dev = get_device(device) if device is not None else None
    abuf, aoff, ash, dev = _operand(a, "a", dev)
    bbuf, boff, bsh, bdev = _operand(b, "b", dev)
    if bdev.device is not dev.device:
        raise ValueError(f"rlx_gpu.linalg.matmul: a is on {dev.name}, b on {bdev.name}: the same device is needed")
    if len(ash) not in (2, 3) or len(bsh) != len(ash) or (len(ash) == 3 and ash[0] != bsh[0]):
        raise ValueError(f"rlx_gpu.linalg.matmul: shapes {tuple(ash)} and {tuple(bsh)}: expected two matrices or "
                         "two batches of the same size")
    batch = ash[0] if len(ash) == 3 else 1
    M, K = (ash[-1], ash[-2]) if transpose_a else (ash[-2], ash[-1])
    K2, N = (bsh[-1], bsh[-2]) if transpose_b else (bsh[-2], bsh[-1])
    if K != K2:
        raise ValueError(f"rlx_gpu.linalg.matmul: inner dimensions differ ({K} and {K2})")
    shape = (batch, M, N) if len(ash) == 3 else (M, N)
    out = _standalone(dev, shape, "linalg.matmul")
    r = out.binding()
    enc, keep = dev.device.create_command_encoder(), []
    gemm(dev, enc, abuf, bbuf, r["buffer"], M, N, K, ta=transpose_a, tb=transpose_b,
         offsets=(aoff, boff, r["offset"] // 4), batch=batch, keep=keep)
    dev.submit(enc)
    return out if isinstance(a, DeviceTensor) else out.numpy()


def newton_schulz_orth(x, ns_steps: int = 5, ns_coefficients=NS_COEFFICIENTS, eps: float = 1e-7, device=None):
    """Muon's orthogonalisation of a matrix (or a batch, 3-D) in float32: a NumPy array gives a NumPy array, a
    DeviceTensor a new DeviceTensor."""
    if not isinstance(ns_steps, int) or not 0 <= ns_steps < 100:
        raise ValueError(f"rlx_gpu.linalg.newton_schulz_orth: ns_steps must be an int in [0, 100), got {ns_steps!r}")
    if len(tuple(ns_coefficients)) != 3:
        raise ValueError("rlx_gpu.linalg.newton_schulz_orth: ns_coefficients must be three numbers")
    dev = get_device(device) if device is not None else None
    xbuf, xoff, shape, dev = _operand(x, "x", dev)
    if len(shape) not in (2, 3):
        raise ValueError(f"rlx_gpu.linalg.newton_schulz_orth: expected a matrix or a batch of them, got {tuple(shape)}")
    out = _standalone(dev, shape, "linalg.ns")
    r = out.binding()
    batch = shape[0] if len(shape) == 3 else 1
    m, n = shape[-2:]
    enc, keep = dev.device.create_command_encoder(), []
    enc.copy_buffer_to_buffer(xbuf, 4 * xoff, r["buffer"], r["offset"], 4 * batch * m * n)
    ns_encode(dev, enc, r["buffer"], r["offset"] // 4, batch, m, n, ns_steps, ns_coefficients, eps, keep)
    dev.submit(enc)
    return out if isinstance(x, DeviceTensor) else out.numpy()


def cholesky_qr(x, device=None):
    """The Q of the QR of a tall matrix (n >= p) or a batch of them (3-D), R's diagonal positive (the Q NumPy's
    or torch's QR gives after flipping its columns' signs to match): :func:`cholesky_qr_encode` on the GPU. A NumPy
    array gives a NumPy array, a DeviceTensor a new DeviceTensor."""
    dev = get_device(device) if device is not None else None
    xbuf, xoff, shape, dev = _operand(x, "x", dev)
    if len(shape) not in (2, 3) or shape[-2] < shape[-1]:
        raise ValueError(f"rlx_gpu.linalg.cholesky_qr: expected a tall matrix (n >= p) or a batch of them, got "
                         f"{tuple(shape)}")
    out = _standalone(dev, shape, "linalg.cholesky_qr")
    r = out.binding()
    batch = shape[0] if len(shape) == 3 else 1
    n, p = shape[-2:]
    enc, keep = dev.device.create_command_encoder(), []
    y = dev.buffer(4 * batch * n * p, "cholqr.y")
    enc.copy_buffer_to_buffer(xbuf, 4 * xoff, y, 0, 4 * batch * n * p)
    cholesky_qr_encode(dev, enc, y, dev.buffer(4 * batch * n * p, "cholqr.z"), dev.buffer(4 * batch * p * p,
                                                                                         "cholqr.small"),
                       n, p, batch, keep)
    enc.copy_buffer_to_buffer(y, 0, r["buffer"], r["offset"], 4 * batch * n * p)
    dev.submit(enc)
    return out if isinstance(x, DeviceTensor) else out.numpy()
