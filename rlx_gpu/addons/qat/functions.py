"""Fake quantization on the device, named as torch names it: NumPy arrays in, NumPy arrays out; DeviceTensors in, a
new DeviceTensor out. The spec is :mod:`rlx_gpu.reference.qat` (bit for bit); the kernels are
``shaders/qat_kernels.wgsl`` over ``shaders/qat.wgsl``'s functions.

    fake_quantize_per_tensor_affine(x, scale, zero_point, quant_min, quant_max)
    fake_quantize_per_channel_affine(x, scale, zero_point, axis, quant_min, quant_max)
    fake_quantize_fp8(x, fmt="e4m3fn" | "e5m2", saturate=True)
    ste_backward(dy, x, scale, zero_point, quant_min, quant_max)            dy * mask (torch's backward)
    ste_backward_per_channel(dy, x, scale, zero_point, axis, quant_min, quant_max)
    ste_backward_fp8(dy, x, fmt, saturate=True)
    lsq_backward(dy, x, scale, zero_point, quant_min, quant_max, grad_factor=1.0) -> dx, dscale, dzero_point

``scale`` may also be a device :class:`QParams` (an observer's ``qparams``), with ``zero_point=None``: the whole
loop then stays on the device.
"""
from __future__ import annotations

import numpy as np

from ...reference import qat as ref
from .kernels import E5M2, PER_CHANNEL, SATURATE, QParams, args_words, operand, run

__all__ = ["fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine", "fake_quantize_fp8",
           "ste_backward", "ste_backward_per_channel", "ste_backward_fp8", "lsq_backward"]

F32 = np.float32


def _qparams(who, dev, scale, zero_point, qmin, qmax, channels=None) -> QParams:
    """A :class:`QParams` from host scale/zero point (checked: finite positive scales, integer zero points within
    [quant_min, quant_max], one per channel), or the device one given."""
    if isinstance(scale, QParams):
        if zero_point is not None:
            raise ValueError(f"{who}: scale is a device QParams (it holds the zero points): pass zero_point=None")
        if scale.device.device is not dev.device:
            raise ValueError(f"{who}: the QParams are on {scale.device.name}, x on {dev.name}")
        if scale.channels != (channels or 1):
            raise ValueError(f"{who}: the QParams hold {scale.channels} channels, expected {channels or 1}")
        return scale
    s = np.asarray(scale, dtype=np.float64).reshape(-1)
    z = np.asarray(zero_point).reshape(-1)
    want = channels or 1
    if s.size != want or z.size != want:
        raise ValueError(f"{who}: expected {want} scale(s) and zero point(s), got {s.size} and {z.size}")
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError(f"{who}: scale must be finite and positive, got {s[:4]}")
    if not (np.issubdtype(z.dtype, np.integer) or (np.isfinite(z.astype(np.float64)).all()
                                                   and (z == np.round(z)).all())):
        raise TypeError(f"{who}: zero_point must hold integers, got {z[:4]}")
    if not ((z >= qmin) & (z <= qmax)).all():
        raise ValueError(f"{who}: `zero_point` must be between `quant_min` and `quant_max` ({qmin}, {qmax}), got "
                         f"{z[:4]}")
    return QParams.upload(dev, s.astype(F32), z.astype(np.int64))


def _axis(who, shape, axis) -> int:
    if not isinstance(axis, (int, np.integer)) or not -len(shape) <= axis < len(shape) or not len(shape):
        raise ValueError(f"{who}: axis {axis!r} out of range for a tensor of shape {tuple(shape)}")
    return int(axis) % len(shape)


def _same(who, x, dy):
    if dy.shape != x.shape:
        raise ValueError(f"{who}: dy has shape {dy.shape}, x {x.shape}: they must be equal")


def fake_quantize_per_tensor_affine(x, scale, zero_point, quant_min: int, quant_max: int, *, device=None):
    """torch.fake_quantize_per_tensor_affine on the device (float32; ``device`` for NumPy input)."""
    who = "rlx_gpu.qat.fake_quantize_per_tensor_affine"
    qmin, qmax = ref.check_qrange(who, quant_min, quant_max)
    xo = operand(who, "x", x, _dev(device))
    qp = _qparams(who, xo.device, scale, zero_point, qmin, qmax)
    return run(who, "fq_affine", xo, args_words(xo.n, qmin=qmin, qmax=qmax), qp)[0]


def fake_quantize_per_channel_affine(x, scale, zero_point, axis: int, quant_min: int, quant_max: int, *,
                                     device=None):
    """torch.fake_quantize_per_channel_affine on the device (float32, integer zero points)."""
    who = "rlx_gpu.qat.fake_quantize_per_channel_affine"
    qmin, qmax = ref.check_qrange(who, quant_min, quant_max)
    xo = operand(who, "x", x, _dev(device))
    ax = _axis(who, xo.shape, axis)
    qp = _qparams(who, xo.device, scale, zero_point, qmin, qmax, xo.shape[ax])
    inner = int(np.prod(xo.shape[ax + 1:], dtype=np.int64))
    words = args_words(xo.n, xo.shape[ax], inner, PER_CHANNEL, qmin, qmax)
    return run(who, "fq_affine", xo, words, qp)[0]


def _fp8_flags(who, fmt, saturate) -> int:
    if fmt not in ref.FP8:
        raise ValueError(f"{who}: fmt must be 'e4m3fn' or 'e5m2', got {fmt!r}")
    return (E5M2 if fmt == "e5m2" else 0) | (SATURATE if saturate else 0)


def fake_quantize_fp8(x, fmt: str = "e4m3fn", saturate: bool = True, *, device=None):
    """``x`` rounded to float8 ``fmt`` (nearest even) and back to float32; ``saturate`` clamps +-inf and out of
    range values to +-max (torch 2.13's e4m3fn cast does; ``saturate=False``: e4m3fn NaN, e5m2 inf, as torch 2.11's
    casts)."""
    who = "rlx_gpu.qat.fake_quantize_fp8"
    flags = _fp8_flags(who, fmt, saturate)
    xo = operand(who, "x", x, _dev(device))
    return run(who, "fq_fp8", xo, args_words(xo.n, flags=flags))[0]


def ste_backward(dy, x, scale, zero_point, quant_min: int, quant_max: int, *, device=None):
    """The straight-through gradient of :func:`fake_quantize_per_tensor_affine`: ``dy * mask`` as torch's
    backward (the mask recomputed from ``x``: quant_min <= zero_point + rint(x / scale) <= quant_max)."""
    who = "rlx_gpu.qat.ste_backward"
    qmin, qmax = ref.check_qrange(who, quant_min, quant_max)
    xo = operand(who, "x", x, _dev(device))
    g = operand(who, "dy", dy, xo.device)
    _same(who, xo, g)
    qp = _qparams(who, xo.device, scale, zero_point, qmin, qmax)
    return run(who, "ste", xo, args_words(xo.n, qmin=qmin, qmax=qmax), qp, g)[0]


def ste_backward_per_channel(dy, x, scale, zero_point, axis: int, quant_min: int, quant_max: int, *, device=None):
    """The straight-through gradient of :func:`fake_quantize_per_channel_affine` (``dy * mask``)."""
    who = "rlx_gpu.qat.ste_backward_per_channel"
    qmin, qmax = ref.check_qrange(who, quant_min, quant_max)
    xo = operand(who, "x", x, _dev(device))
    g = operand(who, "dy", dy, xo.device)
    _same(who, xo, g)
    ax = _axis(who, xo.shape, axis)
    qp = _qparams(who, xo.device, scale, zero_point, qmin, qmax, xo.shape[ax])
    inner = int(np.prod(xo.shape[ax + 1:], dtype=np.int64))
    return run(who, "ste", xo, args_words(xo.n, xo.shape[ax], inner, PER_CHANNEL, qmin, qmax), qp, g)[0]


def ste_backward_fp8(dy, x, fmt: str = "e4m3fn", saturate: bool = True, *, device=None):
    """The straight-through gradient of :func:`fake_quantize_fp8` (torch.clamp's mask when saturating)."""
    who = "rlx_gpu.qat.ste_backward_fp8"
    flags = _fp8_flags(who, fmt, saturate)
    xo = operand(who, "x", x, _dev(device))
    g = operand(who, "dy", dy, xo.device)
    _same(who, xo, g)
    return run(who, "ste", xo, args_words(xo.n, flags=flags, qmin=1.0, qmax=0.0), None, g)[0]


def lsq_backward(dy, x, scale, zero_point, quant_min: int, quant_max: int, grad_factor: float = 1.0, *,
                 device=None):
    """Learnable scale and zero point (LSQ): ``(dx, dscale, dzero_point)`` as torch's
    ``_fake_quantize_learnable_per_tensor_affine`` backward computes them (``scale``, ``zero_point``: floats, the
    learnable values; the zero point is used as int(clamp(zero_point + 0.5)), as torch's backward does). ``dx`` is
    of x's kind; ``dscale``/``dzero_point`` are float32 arrays of one element (the per-element terms summed on the
    device, in another order than torch's sum: equal to float32 rounding of the sum)."""
    who = "rlx_gpu.qat.lsq_backward"
    qmin, qmax = ref.check_qrange(who, quant_min, quant_max)
    s = float(np.asarray(scale, np.float64).reshape(-1)[0]) if np.size(scale) == 1 else None
    z = float(np.asarray(zero_point, np.float64).reshape(-1)[0]) if np.size(zero_point) == 1 else None
    if s is None or z is None or not np.isfinite(z):
        raise ValueError(f"{who}: scale and zero_point must be one number each (per tensor), got {scale!r}, "
                         f"{zero_point!r}")
    zb = int(F32(min(max(F32(z) + F32(0.5), F32(qmin)), F32(qmax))))
    xo = operand(who, "x", x, _dev(device))
    g = operand(who, "dy", dy, xo.device)
    _same(who, xo, g)
    qp = _qparams(who, xo.device, s, zb, qmin, qmax)
    dx, sums = run(who, "lsq", xo, args_words(xo.n, qmin=qmin, qmax=qmax, grad_factor=float(F32(grad_factor))), qp,
                   g, partials=True)
    return dx, sums[:1].copy(), sums[1:].copy()


def _dev(device):
    from ...runtime.device import get_device
    return get_device(device) if device is not None else None
