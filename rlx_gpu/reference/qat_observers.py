"""NumPy twins of torch.ao.quantization's min/max observers (the specification of :mod:`rlx_gpu.qat`'s device
observers): ``MinMaxObserver``, ``MovingAverageMinMaxObserver``, ``PerChannelMinMaxObserver`` and
``MovingAveragePerChannelMinMaxObserver``, with torch's arguments (``dtype`` "quint8"/"qint8", ``qscheme``
"per_tensor_affine"/"per_tensor_symmetric"/"per_channel_affine"/"per_channel_symmetric" (torch's objects work too),
``reduce_range``, ``quant_min``/``quant_max``, ``eps``, ``averaging_constant``, ``ch_axis``) and its arithmetic:

    observe:    min = min(min, aminmax(x)) (moving average: min += c * (aminmax(x) - min), the first batch taken
                whole); NaN propagates as in torch.aminmax
    affine:     scale = max((max(max, 0) - min(min, 0)) / (quant_max - quant_min), eps)
                zero_point = clamp(quant_min - rint(min(min, 0) / scale), quant_min, quant_max)
    symmetric:  scale = max(max(-min(min, 0), max(max, 0)) / ((quant_max - quant_min) / 2), eps),
                zero_point = 0 (quint8: 128, or (quant_min + quant_max) // 2 for a custom range)

all in float32 (torch's divisions are IEEE float32 divisions; the averaging constant is rounded to float32).
Nothing observed yet gives scale 1, zero point 0, as torch (which also warns).
"""
from __future__ import annotations

import numpy as np

__all__ = ["ObserverConfig", "MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
           "MovingAveragePerChannelMinMaxObserver", "symmetric_qparams", "affine_qparams"]

F32 = np.float32
EPS = float(np.finfo(F32).eps)
DTYPES = {"quint8": (0, 255), "qint8": (-128, 127), "uint8": (0, 255), "int8": (-128, 127)}
SCHEMES = ("per_tensor_affine", "per_tensor_symmetric", "per_channel_affine", "per_channel_symmetric")


def _name(v) -> str:
    return str(v).replace("torch.", "")


def symmetric_qparams(min_val, max_val, quant_min, quant_max, eps=EPS) -> np.ndarray:
    """torch.ao's symmetric scale of float32 min/max arrays (zero points are the caller's)."""
    mn = np.minimum(np.asarray(min_val, F32), F32(0))
    mx = np.maximum(np.asarray(max_val, F32), F32(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        amax = np.maximum(-mn, mx)
        return np.maximum(amax / F32((quant_max - quant_min) / 2), F32(eps)).astype(F32)


def affine_qparams(min_val, max_val, quant_min, quant_max, eps=EPS):
    """torch.ao's affine ``(scale, zero_point)`` of float32 min/max arrays."""
    mn = np.minimum(np.asarray(min_val, F32), F32(0))
    mx = np.maximum(np.asarray(max_val, F32), F32(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.maximum((mx - mn) / F32(quant_max - quant_min), F32(eps)).astype(F32)
        r = np.rint(mn / scale)
        zp = quant_min - np.where(np.isfinite(r), r, 0).astype(np.int64)
    return scale, np.clip(zp, quant_min, quant_max).astype(np.int64)


class ObserverConfig:
    """An observer's settings, checked as torch checks them: ``quant_min``/``quant_max`` (the range torch's
    ``calculate_qmin_qmax`` gives), ``symmetric``, ``per_channel``, ``eps``, ``averaging_constant`` (None: plain
    min/max) and ``ch_axis``."""

    def __init__(self, who, dtype="quint8", qscheme="per_tensor_affine", reduce_range=False, quant_min=None,
                 quant_max=None, eps=EPS, averaging_constant=None, ch_axis=0):
        self.who = who
        self.dtype, self.qscheme = _name(dtype), _name(qscheme)
        if self.dtype not in DTYPES:
            raise ValueError(f"{who}: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        if self.qscheme not in SCHEMES:
            raise ValueError(f"{who}: qscheme must be one of {SCHEMES}, got {qscheme!r}")
        self.per_channel = self.qscheme.startswith("per_channel")
        self.symmetric = self.qscheme.endswith("symmetric")
        if self.symmetric and reduce_range and self.dtype in ("quint8", "uint8"):
            raise NotImplementedError(f"{who}: Cannot reduce range for symmetric quantization for quint8 (as torch)")
        self.custom = quant_min is not None and quant_max is not None
        if self.custom:
            if not (int(quant_min) <= 0 <= int(quant_max)):
                raise ValueError(f"{who}: Used-specified quantization range must include 0 (got {quant_min}, "
                                 f"{quant_max})")
            if not int(quant_min) < int(quant_max):
                raise ValueError(f"{who}: qmin must be strictly less than qmax for user-specified quantization range")
            lo, hi = int(quant_min), int(quant_max)
            if hi - lo + 1 > 256:
                raise ValueError(f"{who}: quantization range should be positive and not exceed the maximum bit range "
                                 f"(=256), got [{lo}, {hi}]")
            lo, hi = (lo // 2, hi // 2) if reduce_range else (lo, hi)
        else:
            lo, hi = DTYPES[self.dtype]
            if reduce_range:
                lo, hi = (-64, 63) if lo < 0 else (0, 127)
        self.quant_min, self.quant_max = lo, hi
        if not (isinstance(eps, (int, float)) and eps > 0):
            raise ValueError(f"{who}: eps must be a positive number, got {eps!r}")
        self.eps = float(F32(eps))
        if averaging_constant is not None and not 0 < float(averaging_constant) <= 1:
            raise ValueError(f"{who}: averaging_constant must be in (0, 1], got {averaging_constant!r}")
        self.averaging_constant = averaging_constant
        self.ch_axis = int(ch_axis)

    @property
    def unsigned_zero_point(self) -> int:
        """The symmetric scheme's zero point for quint8 (torch: 128, or the range's rounded-down midpoint)."""
        return (self.quant_min + self.quant_max) // 2 if self.custom else 128

    def qparams(self, min_val, max_val):
        """``(scale float32, zero_point int64)`` arrays from observed min/max arrays."""
        mn, mx = np.asarray(min_val, F32).reshape(-1), np.asarray(max_val, F32).reshape(-1)
        if mn.size == 0 or (not self.per_channel and mn[0] == np.inf and mx[0] == -np.inf):
            return np.ones(1, F32), np.zeros(1, np.int64)
        if self.symmetric:
            zp = self.unsigned_zero_point if self.dtype in ("quint8", "uint8") else 0
            return (symmetric_qparams(mn, mx, self.quant_min, self.quant_max, self.eps),
                    np.full(mn.shape, zp, np.int64))
        return affine_qparams(mn, mx, self.quant_min, self.quant_max, self.eps)


class MinMaxObserver:
    """torch.ao.quantization.MinMaxObserver's twin: ``forward(x)`` (returns x), ``min_val``/``max_val``,
    ``calculate_qparams()``."""
    moving = False
    per_channel = False

    def __init__(self, dtype="quint8", qscheme=None, reduce_range=False, quant_min=None, quant_max=None,
                 eps=EPS, averaging_constant=0.01, ch_axis=0):
        qscheme = qscheme or ("per_channel_affine" if self.per_channel else "per_tensor_affine")
        self.config = ObserverConfig(type(self).__name__, dtype, qscheme, reduce_range, quant_min, quant_max, eps,
                                     averaging_constant if self.moving else None, ch_axis)
        if self.config.per_channel != self.per_channel:
            raise ValueError(f"{type(self).__name__}: qscheme {qscheme!r} does not fit a "
                             f"{'per-channel' if self.per_channel else 'per-tensor'} observer")
        self.min_val = np.array(np.inf, F32) if not self.per_channel else np.zeros(0, F32)
        self.max_val = np.array(-np.inf, F32) if not self.per_channel else np.zeros(0, F32)

    def _cur(self, x):
        if not self.per_channel:
            return np.min(x), np.max(x)
        y = np.moveaxis(x, self.config.ch_axis, 0).reshape(x.shape[self.config.ch_axis], -1)
        return np.min(y, axis=1), np.max(y, axis=1)

    def forward(self, x):
        x = np.asarray(x, F32)
        if x.size == 0:
            return x
        mn, mx = self._cur(x)
        first = self.min_val.size == 0 or (not self.per_channel and self.min_val == np.inf and self.max_val == -np.inf)
        if first:
            self.min_val, self.max_val = np.asarray(mn, F32), np.asarray(mx, F32)
        elif self.moving:
            c = F32(self.config.averaging_constant)
            self.min_val = (self.min_val + c * (mn - self.min_val)).astype(F32)
            self.max_val = (self.max_val + c * (mx - self.max_val)).astype(F32)
        else:
            self.min_val, self.max_val = np.minimum(mn, self.min_val), np.maximum(mx, self.max_val)
        return x

    __call__ = forward

    def calculate_qparams(self):
        """``(scale, zero_point)``: float32 and int64 arrays of one element (per tensor) or one per channel."""
        return self.config.qparams(self.min_val, self.max_val)


class MovingAverageMinMaxObserver(MinMaxObserver):
    """torch.ao.quantization.MovingAverageMinMaxObserver's twin (``averaging_constant``, default 0.01)."""
    moving = True


class PerChannelMinMaxObserver(MinMaxObserver):
    """torch.ao.quantization.PerChannelMinMaxObserver's twin (``ch_axis``, default 0)."""
    per_channel = True


class MovingAveragePerChannelMinMaxObserver(MinMaxObserver):
    """torch.ao.quantization.MovingAveragePerChannelMinMaxObserver's twin."""
    moving = True
    per_channel = True
