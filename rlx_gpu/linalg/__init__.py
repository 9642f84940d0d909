"""Matrix algebra on the GPU: a batched, tiled GEMM (``shaders/gemm.wgsl``) and Newton-Schulz orthogonalisation
(Muon's ``zeropower``), for NumPy arrays or :class:`~rlx_gpu.DeviceTensor`\\ s (the result is of the kind given).

    matmul(a, b, transpose_a=False, transpose_b=False)   a @ b, batched over a leading dimension
    newton_schulz_orth(x, ns_steps=5, ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7)
    cholesky_qr(x)                                        the Q of a tall matrix's QR (R's diagonal positive)
    gemm_path(dtype, device=None, path="auto")            which GEMM runs for float16 / float32 work

float32, and a float16 path on adapters with shader-f16 (``shaders/gemm16.wgsl``: packed f16 products summed 16 at a
time, the partial sums added in float32): ``matmul`` of float16 arrays, ``newton_schulz_orth(..., ns_dtype=
"float16")`` and Muon's ``ns_dtype``. Where the device offers subgroup matrices, float16 work runs on the
tensor-core GEMM instead (``linalg/tc.py``: f16 products summed in float32; ``path="emulated"`` runs the same kernel
without them, ``path="tiled"`` keeps gemm16). Sums run in another order than NumPy's: results agree to float32
rounding over K terms (tests/test_muon.py and tests/test_tc.py state the tolerances).
"""
from __future__ import annotations

import numpy as np

from ..core.lowp import F32
from ..runtime.arena import Arena, DeviceTensor
from ..runtime.device import get_device
from .factor import cholesky_qr_encode  # noqa: F401
from .record import (TILE, _bind, _prm, copy_range, frob_scale, gemm,  # noqa: F401
                            ns_dispatches, ns_encode, ns_encode16)
from .tc import as_f16_buffer, resolve_path, tc_gemm
from .tcns import Job, ns_tc  # noqa: F401 (Muon records it)
from ..runtime.layout import Layout

__all__ = ["matmul", "newton_schulz_orth", "cholesky_qr", "gemm_path", "NS_COEFFICIENTS"]

NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)
"""Newton-Schulz's (a, b, c): torch.optim.Muon's default quintic coefficients (X = a X + (b A + c A A) X)."""
def _standalone(dev, shape, label) -> DeviceTensor:
    n = int(np.prod(shape))
    lay = Layout([n], alignment=dev.alignment, max_binding=dev.max_storage_binding, block=4)
    if len(lay.pieces[0]) != 1:
        raise ValueError(f"rlx_gpu.linalg: the result ({n} elements) does not fit one storage binding on {dev.name} "
                         f"({dev.max_storage_binding} bytes)")
    return DeviceTensor(Arena(dev, lay, label, F32), 0, label, tuple(shape))


def _fits(dev, name: str, nbytes: int) -> None:
    """A ValueError naming operand ``name`` if it cannot be bound whole (past the device's max storage binding)."""
    if nbytes > dev.max_storage_binding:
        raise ValueError(f"rlx_gpu.linalg: {name} holds {nbytes} bytes, more than one storage binding takes on "
                         f"{dev.name} ({dev.max_storage_binding}); split it (over its batch or its rows)")


def _operand(x, name, dev):
    """(buffer, element offset, shape, device) of a NumPy array (uploaded) or a float32 DeviceTensor."""
    if isinstance(x, DeviceTensor):
        if x.dtype != np.float32:
            raise TypeError(f"rlx_gpu.linalg: {name} is a DeviceTensor of {x.dtype}, expected float32")
        _fits(x.device, name, 4 * x.size)
        r = x.binding()
        return r["buffer"], r["offset"] // 4, x.shape, x.device
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError(f"rlx_gpu.linalg: {name} must be a float32 NumPy array or DeviceTensor, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    dev = dev or get_device(None)
    _fits(dev, name, x.nbytes)
    return dev.buffer(max(4, x.nbytes), f"linalg.{name}", data=np.ascontiguousarray(x)), 0, x.shape, dev


def f16_device(dev, who: str):
    """``dev`` if its adapter has shader-f16, else a ValueError naming ``who``."""
    if "shader-f16" not in dev.features:
        raise ValueError(f"{who}: float16 needs an adapter with shader-f16; {dev.name} has none (use float32)")
    return dev


def gemm_path(dtype="float16", device=None, path: str = "auto") -> str:
    """The GEMM that :func:`matmul` and :func:`newton_schulz_orth` run for ``dtype`` work on ``device``:
    "subgroup-matrix" (the tensor cores; float16 where the adapter offers them), "emulated" (the same kernel
    without them, when asked), or "tiled" (``gemm.wgsl``/``gemm16.wgsl``). ``path`` is what the caller asks for;
    a path the device cannot run is a ValueError (``RLX_GPU_REQUIRE_SUBGROUP_MATRIX=1`` makes "auto" one)."""
    if np.dtype(dtype) == np.float32:
        if path not in ("auto", "tiled"):
            raise ValueError(f"rlx_gpu.linalg: path={path!r} takes float16 work; float32 runs 'tiled'")
        return "tiled"
    if np.dtype(dtype) != np.float16:
        raise TypeError(f"rlx_gpu.linalg: dtype must be float16 or float32, got {dtype}")
    dev = f16_device(get_device(device), "rlx_gpu.linalg")
    return resolve_path(dev, path, "rlx_gpu.linalg")
def _matmul16(a, b, ta, tb, device, path):
    """float16 NumPy operands: a float16 result, on the tensor-core GEMM (f32 sums) or gemm16 (:func:`gemm`
    with ``f16``: partial sums of 16 products in f16)."""
    dev = f16_device(get_device(device), "rlx_gpu.linalg.matmul")
    path = gemm_path(np.float16, dev, path)
    if a.ndim not in (2, 3) or b.ndim != a.ndim or (a.ndim == 3 and a.shape[0] != b.shape[0]):
        raise ValueError(f"rlx_gpu.linalg.matmul: shapes {a.shape} and {b.shape}: expected two matrices or two "
                         "batches of the same size")
    batch = a.shape[0] if a.ndim == 3 else 1
    M, K = (a.shape[-1], a.shape[-2]) if ta else a.shape[-2:]
    K2, N = (b.shape[-1], b.shape[-2]) if tb else b.shape[-2:]
    if K != K2:
        raise ValueError(f"rlx_gpu.linalg.matmul: inner dimensions differ ({K} and {K2})")
    for name, n in (("a", a.size), ("b", b.size), ("the result", batch * M * N)):
        _fits(dev, name, 2 * n)
    bufs = [as_f16_buffer(dev, x, "linalg.f16") for x in (a, b)]
    c = dev.buffer(4 * (-(-batch * M * N // 2)) or 4, "linalg.f16.out")
    enc, keep = dev.device.create_command_encoder(), []
    if path == "tiled":
        gemm(dev, enc, bufs[0], bufs[1], c, M, N, K, ta=ta, tb=tb, batch=batch, keep=keep, f16=True)
    else:
        tc_gemm(dev, enc, bufs[0], bufs[1], c, M, N, K, mode=path, ta=ta, tb=tb, batch=batch, out="f16", keep=keep)
    dev.submit(enc)
    out = dev.read(c, 0, c.size, out=np.empty(c.size // 2, np.float16))[:batch * M * N]
    return out.reshape((batch, M, N) if a.ndim == 3 else (M, N))


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False, device=None, path: str = "auto"):
    """``op(a) @ op(b)`` for 2-D operands or batches of equal size (3-D); NumPy in, NumPy out; DeviceTensors in,
    a DeviceTensor out (on their device). float16 NumPy operands (both) give a float16 result (adapters with
    shader-f16): on the tensor-core GEMM where the device has subgroup matrices (products summed in float32),
    else gemm16 (products summed 16 at a time in f16, so those partial sums must stay below 65504); ``path``
    picks one (:func:`gemm_path` says which runs)."""
    if all(isinstance(x, np.ndarray) and x.dtype == np.float16 for x in (a, b)):
        return _matmul16(a, b, transpose_a, transpose_b, device, path)
    gemm_path(np.float32, None, path)
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


def newton_schulz_orth(x, ns_steps: int = 5, ns_coefficients=NS_COEFFICIENTS, eps: float = 1e-7, device=None,
                       ns_dtype: str = "float32", path: str = "auto"):
    """Muon's orthogonalisation of a matrix (or a batch, 3-D), float32 in and out: a NumPy array gives a NumPy
    array, a DeviceTensor a new DeviceTensor. ``ns_dtype="float16"``: the iteration in float16 (adapters with
    shader-f16; :func:`ns_encode16`), on the tensor-core GEMM where the device has subgroup matrices (``path``
    and :func:`gemm_path` as for :func:`matmul`)."""
    if ns_dtype not in ("float32", "float16"):
        raise ValueError(f"rlx_gpu.linalg.newton_schulz_orth: ns_dtype must be 'float32' or 'float16', got "
                         f"{ns_dtype!r}")
    if not isinstance(ns_steps, int) or not 0 <= ns_steps < 100:
        raise ValueError(f"rlx_gpu.linalg.newton_schulz_orth: ns_steps must be an int in [0, 100), got {ns_steps!r}")
    if len(tuple(ns_coefficients)) != 3:
        raise ValueError("rlx_gpu.linalg.newton_schulz_orth: ns_coefficients must be three numbers")
    dev = get_device(device) if device is not None else None
    xbuf, xoff, shape, dev = _operand(x, "x", dev)
    if len(shape) not in (2, 3):
        raise ValueError(f"rlx_gpu.linalg.newton_schulz_orth: expected a matrix or a batch of them, got {tuple(shape)}")
    which = gemm_path(np.float16 if ns_dtype == "float16" else np.float32, dev, path)
    out = _standalone(dev, shape, "linalg.ns")
    r = out.binding()
    batch = shape[0] if len(shape) == 3 else 1
    m, n = shape[-2:]
    enc, keep = dev.device.create_command_encoder(), []
    enc.copy_buffer_to_buffer(xbuf, 4 * xoff, r["buffer"], r["offset"], 4 * batch * m * n)
    if which == "tiled":
        ns_encode(dev, enc, r["buffer"], r["offset"] // 4, batch, m, n, ns_steps, ns_coefficients, eps, keep,
                  f16=ns_dtype == "float16")
    else:
        ns_tc(dev, enc, [Job(r["buffer"], r["offset"] // 4, batch, m, n)], ns_steps, ns_coefficients, eps, keep,
              which)
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
