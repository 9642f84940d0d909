"""NumPy twins of quantization-aware training: the specification of :mod:`rlx_gpu.qat`, of ``shaders/qat.wgsl`` and
of the optimizers' ``qat=`` export (:func:`export_copy`). float32 in, float32 out, in torch's CPU order of
operations (PyTorch 2.13, ``aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp``):

    per tensor:   q_f = zero_point + rint(x * (1/scale))       (float32; rint rounds half to even)
                  y = (clamp(q_f, quant_min, quant_max) - zero_point) * scale,  NaN -> quant_min (fmax skips NaN)
                  mask = quant_min <= q_f <= quant_max          (the straight-through gradient: dy * mask)
    per channel:  q = int64(zero_point[c] + rint(x * (1/scale[c])))   (x86: NaN, +-inf, |q| >= 2^63 -> INT64_MIN)
                  y = (clamp(q) - zero_point[c]) * scale[c],  mask = quant_min <= q <= quant_max
    fp8:          round to nearest even to float8 e4m3fn / e5m2 and back (c10's conversions, bit for bit); out of
                  range saturates to +-max (inf too) unless ``saturate=False``: e4m3fn NaN, e5m2 +-inf. NaN stays
                  NaN (code 0x7f | sign; read back as torch does: 0x7ff00000 / 0x7fe00000 | sign).
    LSQ backward: torch's ``_fake_quantize_learnable_per_tensor_affine`` gradients (:func:`lsq_backward`).

Measured on torch 2.13's CPU kernels (tests/test_qat.py): per tensor +inf gives quant_max and -inf, NaN quant_min;
per channel +-inf and NaN all give quant_min; ``x.to(torch.float8_e4m3fn)`` saturates (inf and 1e6 give 448), so
``saturate=True`` is torch 2.13's e4m3fn cast and ``saturate=False`` its e5m2 cast. torch up to 2.11 gave e4m3fn NaN
past 464 (the OCP non-saturating rule, ``saturate=False``); in range every version casts alike.
"""
from __future__ import annotations

import numpy as np

__all__ = ["FP8", "fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine", "per_tensor_codes",
           "per_channel_codes", "fake_quantize_fp8", "fp8_codes", "fp8_values", "ste_backward",
           "ste_backward_per_channel", "ste_backward_fp8", "lsq_backward", "check_qrange", "channel_index"]

F32 = np.float32
INT64_MIN = -(2 ** 63)
# format -> (largest finite value, exponent bias, mantissa bits, smallest normal exponent)
FP8 = {"e4m3fn": (448.0, 7, 3, -6), "e5m2": (57344.0, 15, 2, -14)}


def check_qrange(who: str, quant_min: int, quant_max: int) -> tuple[int, int]:
    """``(quant_min, quant_max)`` as ints, or a ValueError naming ``who`` (torch's rule, and both within +-2^24 so
    every code and code difference is exact in float32)."""
    try:
        lo, hi = int(quant_min), int(quant_max)
    except (TypeError, ValueError):
        raise TypeError(f"{who}: quant_min and quant_max must be integers, got {quant_min!r}, {quant_max!r}") from None
    if lo != quant_min or hi != quant_max:
        raise TypeError(f"{who}: quant_min and quant_max must be integers, got {quant_min!r}, {quant_max!r}")
    if not lo <= hi:
        raise ValueError(f"{who}: `quant_min` should be less than or equal to `quant_max` (got {lo}, {hi})")
    if lo < -2 ** 24 or hi > 2 ** 24:
        raise ValueError(f"{who}: quant_min and quant_max must lie within +-2^24, got {lo}, {hi}")
    return lo, hi


def _x(x) -> np.ndarray:
    return np.asarray(x, F32)


def per_tensor_codes(x, scale, zero_point, quant_min, quant_max):
    """``(q, mask)``: the clamped codes (float32, integer-valued) and the in-range mask of per-tensor affine
    fake-quantization, as torch's CPU kernel computes them."""
    x = _x(x)
    inv = F32(1) / F32(scale)
    with np.errstate(invalid="ignore", over="ignore"):
        qf = F32(zero_point) + np.rint(x * inv)
        mask = (qf >= quant_min) & (qf <= quant_max)
        q = np.minimum(np.maximum(np.where(np.isnan(qf), F32(quant_min), qf), F32(quant_min)), F32(quant_max))
    return q.astype(F32), mask


def fake_quantize_per_tensor_affine(x, scale, zero_point, quant_min, quant_max) -> np.ndarray:
    """torch.fake_quantize_per_tensor_affine (float32)."""
    q, _ = per_tensor_codes(x, scale, zero_point, quant_min, quant_max)
    return ((q - F32(zero_point)) * F32(scale)).astype(F32)


def channel_index(shape, axis: int) -> np.ndarray:
    """The channel of every element of a C-ordered array of ``shape`` along ``axis`` (flat, int64)."""
    shape = tuple(shape)
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return (np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64) // max(1, inner)) % shape[axis]


def _bcast(v, shape, axis):
    s = [1] * len(shape)
    s[axis] = shape[axis]
    return np.asarray(v).reshape(s)


def per_channel_codes(x, scale, zero_point, axis, quant_min, quant_max):
    """``(q, mask)`` of per-channel affine fake-quantization (integer zero points), as torch's CPU kernel."""
    x = _x(x)
    sc = _bcast(np.asarray(scale, F32), x.shape, axis)
    zp = _bcast(np.asarray(zero_point, np.int64), x.shape, axis)
    inv = (F32(1) / sc).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        qf = zp.astype(F32) + np.rint(x * inv)
        bad = ~np.isfinite(qf) | (np.abs(qf) >= F32(2.0 ** 63))  # (x86's float -> int64: INT64_MIN)
        mask = ~bad & (qf >= quant_min) & (qf <= quant_max)
        q = np.where(bad, F32(quant_min), np.minimum(np.maximum(qf, F32(quant_min)), F32(quant_max)))
    return q.astype(F32), mask


def fake_quantize_per_channel_affine(x, scale, zero_point, axis, quant_min, quant_max) -> np.ndarray:
    """torch.fake_quantize_per_channel_affine (float32 x and scale, integer zero_point)."""
    x = _x(x)
    q, _ = per_channel_codes(x, scale, zero_point, axis, quant_min, quant_max)
    sc = _bcast(np.asarray(scale, F32), x.shape, axis)
    zp = _bcast(np.asarray(zero_point, np.int64), x.shape, axis).astype(F32)
    return ((q - zp) * sc).astype(F32)


def fp8_codes(x, fmt: str = "e4m3fn", saturate: bool = True) -> np.ndarray:
    """The float8 bit patterns (uint8) of float32 ``x``, rounded to nearest even by c10's integer rule."""
    if fmt not in FP8:
        raise ValueError(f"fp8 format must be one of {sorted(FP8)}, got {fmt!r}")
    top, bias, mbits, emin = FP8[fmt]
    x = _x(x)
    if saturate:
        x = np.where(np.isnan(x), x, np.clip(x, F32(-top), F32(top)))
    bits = np.ascontiguousarray(x).view(np.uint32)
    sign = (bits >> np.uint32(24)) & np.uint32(0x80)
    mag = bits & np.uint32(0x7fffffff)
    shift = np.uint32(23 - mbits)
    odd = (mag >> shift) & np.uint32(1)
    normal = (mag + np.uint32(((bias - 127) << 23) & 0xffffffff) + np.uint32((1 << (22 - mbits)) - 1) + odd) >> shift
    with np.errstate(over="ignore", invalid="ignore"):
        sub = np.rint(mag.view(F32) * F32(2.0 ** (mbits - emin))).astype(np.uint32)
    code = np.where(mag < np.uint32((emin + 127) << 23), sub, normal)
    big = mag >= np.uint32(0x43f00000 if fmt == "e4m3fn" else 0x47800000)  # (480 and 65536: past the largest)
    over = np.uint32(0x7f) if fmt == "e4m3fn" else np.where(mag > np.uint32(0x7f800000), np.uint32(0x7f),
                                                           np.uint32(0x7c))
    code = np.where(big, over, code)
    return (code | sign).astype(np.uint8).reshape(x.shape)


def fp8_values(codes, fmt: str = "e4m3fn") -> np.ndarray:
    """float32 values of float8 bit patterns, with torch's bits for NaN (0x7ff00000 e4m3fn, 0x7fe00000 e5m2)."""
    top, bias, mbits, emin = FP8[fmt]
    c = np.asarray(codes, np.uint8).astype(np.uint32)
    sign = (c & np.uint32(0x80)) << np.uint32(24)
    e = (c >> np.uint32(mbits)) & np.uint32((1 << (7 - mbits)) - 1)
    m = c & np.uint32((1 << mbits) - 1)
    normal = ((e + np.uint32(127 - bias)) << np.uint32(23)) | (m << np.uint32(23 - mbits))
    sub = (m.astype(F32) * F32(2.0 ** (emin - mbits))).view(np.uint32)
    out = np.where(e == 0, sub, normal)
    if fmt == "e4m3fn":
        out = np.where((e == 15) & (m == 7), np.uint32(0x7ff00000), out)
    else:
        out = np.where(e == 31, np.uint32(0x7f800000) | (m << np.uint32(21)), out)
    return (out | sign).view(F32).reshape(c.shape)


def fake_quantize_fp8(x, fmt: str = "e4m3fn", saturate: bool = True) -> np.ndarray:
    """``x`` rounded to float8 ``fmt`` and back to float32."""
    return fp8_values(fp8_codes(x, fmt, saturate), fmt)


def ste_backward(dy, x, scale, zero_point, quant_min, quant_max) -> np.ndarray:
    """The straight-through gradient of per-tensor fake-quantization: ``dy * mask`` (torch multiplies by the
    boolean mask: a masked NaN stays NaN, a masked negative gives -0)."""
    _, mask = per_tensor_codes(x, scale, zero_point, quant_min, quant_max)
    return (_x(dy) * mask.astype(F32)).astype(F32)


def ste_backward_per_channel(dy, x, scale, zero_point, axis, quant_min, quant_max) -> np.ndarray:
    """The straight-through gradient of per-channel fake-quantization (``dy * mask``)."""
    _, mask = per_channel_codes(x, scale, zero_point, axis, quant_min, quant_max)
    return (_x(dy) * mask.astype(F32)).astype(F32)


def ste_backward_fp8(dy, x, fmt: str = "e4m3fn", saturate: bool = True) -> np.ndarray:
    """The straight-through gradient of :func:`fake_quantize_fp8`: torch.clamp's when saturating (``dy`` where
    -max <= x <= max, else +0: torch selects, it does not multiply), ``dy`` unchanged otherwise."""
    if not saturate:
        return _x(dy).copy()
    top = F32(FP8[fmt][0])
    x = _x(x)
    return np.where((x >= -top) & (x <= top), _x(dy), F32(0)).astype(F32)


def lsq_backward(dy, x, scale, zero_point, quant_min, quant_max, grad_factor: float = 1.0):
    """``(dx, dscale, dzero_point)`` as torch's ``_fake_quantize_learnable_per_tensor_affine`` backward (LSQ,
    Esser et al. 2020): the zero point taken as int(clamp(zero_point + 0.5)), per element
    q = int64(rint(zp + x / scale)), dx = dy * (q in range); dscale = dy * (fq(x) - x) / scale in range, else
    dy * (quant_min - zp) or dy * (quant_max - zp); dzero_point = -dy * scale out of range, else 0; both times
    ``grad_factor`` and summed (float32; the sum's order is NumPy's pairwise one, not torch's)."""
    x, dy = _x(x), _x(dy)
    sc = F32(scale)
    inv = F32(1) / sc
    zp = int(np.float32(min(max(F32(zero_point) + F32(0.5), F32(quant_min)), F32(quant_max))))
    gf = F32(grad_factor)
    with np.errstate(invalid="ignore", over="ignore"):
        qf = np.rint(F32(zp) + x * inv)
        bad = ~np.isfinite(qf) | (np.abs(qf) >= F32(2.0 ** 63))
        lo = bad | (qf < quant_min)
        hi = ~bad & (qf > quant_max)
        inside = ~lo & ~hi
        dx = (dy * inside.astype(F32)).astype(F32)
        xfq = ((np.clip(np.where(bad, F32(quant_min), qf), quant_min, quant_max) - F32(zp)) * sc).astype(F32)
        ds_in = dy * (xfq - x) * inv * gf
        ds_out = np.where(lo, dy * F32(quant_min - zp), dy * F32(quant_max - zp)) * gf
        dscale = np.where(inside, ds_in, ds_out).astype(F32)
        dzp = np.where(inside, F32(0), dy * F32(-1) * sc * gf).astype(F32)
    return dx, np.sum(dscale, dtype=F32).reshape(1), np.sum(dzp, dtype=F32).reshape(1)


def export_copy(w, bits: int, granularity: str = "tensor", axis: int = 0, eps: float = float(np.finfo(F32).eps)):
    """The optimizers' ``qat=`` export of one tensor's updated float32 weights ``w``: symmetric ``bits``-bit codes
    (int8: [-128, 127], int4: [-8, 7]) with torch.ao's per_tensor_symmetric / per_channel_symmetric qparams of
    the weights' own min/max (``MinMaxObserver.calculate_qparams``: scale = max(amax / ((qmax - qmin) / 2), eps),
    zero point 0). Returns ``(codes int8 in the tensor's shape, scale float32 per channel)``; the fake-quantized
    weights are ``codes * scale``."""
    from .qat_observers import symmetric_qparams
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    w = _x(w)
    if granularity == "tensor":
        amax = np.max(np.abs(w)).reshape(1) if w.size else np.zeros(1, F32)
        scale = symmetric_qparams(-amax, amax, qmin, qmax, eps)
        q, _ = per_tensor_codes(w, scale[0], 0, qmin, qmax)
    else:
        moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        amax = np.max(np.abs(moved), axis=1) if moved.shape[1] else np.zeros(w.shape[axis], F32)
        scale = symmetric_qparams(-amax, amax, qmin, qmax, eps)
        q, _ = per_channel_codes(w, scale, np.zeros(w.shape[axis], np.int64), axis, qmin, qmax)
    return q.astype(np.int8), scale.astype(F32)
