"""Observers on the device: torch.ao.quantization's ``MinMaxObserver``, ``MovingAverageMinMaxObserver``,
``PerChannelMinMaxObserver`` and ``MovingAveragePerChannelMinMaxObserver`` with torch's arguments, tracking
min/max (or their moving average) of float32 tensors in device buffers and keeping their quantization parameters
there too (``qparams``: a :class:`~rlx_gpu.qat.QParams` the fake-quantize functions take as ``scale``), as
``calculate_qparams`` computes them (bit for bit: the twins are :mod:`rlx_gpu.reference.qat_observers`).

    obs = rlx_gpu.qat.MovingAverageMinMaxObserver(dtype="quint8")
    obs(x)                                        # or obs.record(encoder, x): two dispatches, nothing read back
    y = rlx_gpu.qat.fake_quantize_per_tensor_affine(x, obs.qparams, None, obs.quant_min, obs.quant_max)
    scale, zero_point = obs.calculate_qparams()   # read back, as torch's
"""
from __future__ import annotations

import numpy as np

from ...runtime.arena import DeviceTensor

from ...reference.qat_observers import EPS, ObserverConfig
from .kernels import MOVING, SYMMETRIC, QParams, args_words, dispatch, groups, operand

__all__ = ["MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
           "MovingAveragePerChannelMinMaxObserver"]

F32 = np.float32


class MinMaxObserver:
    """torch.ao.quantization.MinMaxObserver on the device (``forward``/``__call__``, ``record``, ``qparams``,
    ``calculate_qparams``, ``min_val``/``max_val``, ``state_dict``/``load_state_dict``). The buffers are made on the
    first tensor observed (its device; per channel: its number of channels along ``ch_axis``)."""
    moving = False
    per_channel = False

    def __init__(self, dtype="quint8", qscheme=None, reduce_range=False, quant_min=None, quant_max=None, eps=EPS,
                 averaging_constant=0.01, ch_axis=0):
        qscheme = qscheme or ("per_channel_affine" if self.per_channel else "per_tensor_affine")
        self.config = c = ObserverConfig(type(self).__name__, dtype, qscheme, reduce_range, quant_min, quant_max, eps,
                                         averaging_constant if self.moving else None, ch_axis)
        if c.per_channel != self.per_channel:
            raise ValueError(f"{type(self).__name__}: qscheme {qscheme!r} does not fit a "
                             f"{'per-channel' if self.per_channel else 'per-tensor'} observer")
        self.quant_min, self.quant_max = c.quant_min, c.quant_max
        self.device = None
        self.channels = None
        self._args: dict = {}

    def _setup(self, dev, channels):
        if self.device is None:
            self.device, self.channels = dev, channels
            self._obs = dev.buffer(8 * channels, f"{type(self).__name__}.minmax",
                                   data=np.tile(np.array([np.inf, -np.inf], F32), channels))
            self._mm = dev.buffer(8 * channels, f"{type(self).__name__}.slots")
            self._qp = QParams(dev, channels, f"{type(self).__name__}.qparams")
            dev.queue.write_buffer(self._qp.buffer, 0, np.tile(np.array([1, 1, 0, 0], F32), channels))
            return
        if dev.device is not self.device.device:
            raise ValueError(f"{type(self).__name__}: observes tensors on {self.device.name}, got one on {dev.name}")
        if channels != self.channels:
            raise ValueError(f"{type(self).__name__}: observed {self.channels} channels along axis "
                             f"{self.config.ch_axis}, got a tensor with {channels}")

    def _words(self, n, channels, inner):
        c = self.config
        flags = (MOVING if self.moving else 0) | (SYMMETRIC if c.symmetric else 0)
        zp = c.unsigned_zero_point if c.symmetric and c.dtype in ("quint8", "uint8") else 0
        return args_words(n, channels, inner, flags, c.quant_min, c.quant_max, 1.0,
                          float(F32(c.averaging_constant or 0.0)), c.eps, zp)

    def record(self, encoder, x, shape=None, device=None) -> None:
        """Record the observation of ``x`` into ``encoder``: the batch's min/max, folded into the observed ones,
        and the new qparams. ``x``: a float32 DeviceTensor, a NumPy array (uploaded now), or float32 values your
        own kernels wrote: a buffer range as ``Program`` binds it (``{"buffer", "offset", "size"}``, ``(buffer,
        offset, size)`` or a wgpu buffer) with its ``shape`` (default: one row of ``size / 4``) and ``device``
        (the Device that owns it; default: the one this observer already uses)."""
        who = f"rlx_gpu.qat.{type(self).__name__}"
        xo = operand(who, "x", x, device or self.device, shape)
        if xo.n == 0:
            return
        if self.per_channel:
            ax = self.config.ch_axis
            if not -len(xo.shape) <= ax < len(xo.shape):
                raise ValueError(f"{who}: ch_axis {ax} out of range for shape {xo.shape}")
            ax %= len(xo.shape)
            channels, inner = xo.shape[ax], int(np.prod(xo.shape[ax + 1:], dtype=np.int64))
        else:
            channels, inner = 1, xo.n
        self._setup(xo.device, channels)
        dev = self.device
        words = self._words(xo.n, channels, inner)
        key = words.tobytes()
        if key not in self._args:  # (the argument words of each shape, made once)
            self._args[key] = dev.buffer(64, "qat.args", data=words)
        args = self._args[key]
        dispatch(encoder, dev, "obs_minmax", groups(xo.n), args=args, xin=xo.res(), mm=self._mm)
        dispatch(encoder, dev, "obs_update", -(-channels // 256), args=args, mm=self._mm, obs=self._obs,
                 qp=self._qp.buffer)
        self._keep = xo  # (an uploaded array's buffer lives until the work is done)

    def forward(self, x):
        """Observe ``x`` now (one submission) and return it, as torch's observers do."""
        dev = x.device if isinstance(x, DeviceTensor) else self.device
        if dev is None:
            from ...runtime.device import get_device
            dev = get_device(None)
        enc = dev.encoder()
        self.record(enc, x)
        dev.submit(enc)
        return x

    __call__ = forward

    def _read(self) -> np.ndarray:
        if self.device is None:
            return np.array([[np.inf, -np.inf]], F32)
        return self.device.read(self._obs, 0, 8 * self.channels, out=np.empty((self.channels, 2), F32))

    @property
    def min_val(self) -> np.ndarray:
        v = self._read()[:, 0]
        return v if self.per_channel else v.reshape(())

    @property
    def max_val(self) -> np.ndarray:
        v = self._read()[:, 1]
        return v if self.per_channel else v.reshape(())

    @property
    def qparams(self) -> QParams:
        """The device quantization parameters (updated by every observation; nothing observed: scale 1, zero 0)."""
        if self.device is None:
            raise RuntimeError(f"{type(self).__name__}: nothing observed yet, so no device holds its qparams")
        return self._qp

    def calculate_qparams(self):
        """``(scale float32, zero_point int64)`` arrays as torch's ``calculate_qparams``, read from the device."""
        if self.device is None:
            return self.config.qparams(np.array([np.inf], F32), np.array([-np.inf], F32))
        return self._qp.numpy()

    def state_dict(self) -> dict:
        """``{"min_val", "max_val"}`` as torch's observer buffers."""
        return {"min_val": self.min_val, "max_val": self.max_val}

    def load_state_dict(self, sd: dict, device=None) -> None:
        """Restore observed min/max (and the qparams from them)."""
        mn = np.asarray(sd["min_val"], F32).reshape(-1)
        mx = np.asarray(sd["max_val"], F32).reshape(-1)
        if mn.shape != mx.shape or (not self.per_channel and mn.size != 1):
            raise ValueError(f"{type(self).__name__}: min_val {mn.shape} and max_val {mx.shape} do not fit")
        if self.device is None:
            from ...runtime.device import get_device
            self._setup(get_device(device), mn.size)
        elif mn.size != self.channels:
            raise ValueError(f"{type(self).__name__}: {mn.size} channels in the state, {self.channels} observed")
        self.device.queue.write_buffer(self._obs, 0, np.stack([mn, mx], 1).astype(F32))
        s, z = self.config.qparams(mn, mx)
        q = np.zeros((mn.size, 4), F32)
        q[:, 0], q[:, 1], q[:, 2] = s, F32(1) / s, z
        self.device.queue.write_buffer(self._qp.buffer, 0, q)


class MovingAverageMinMaxObserver(MinMaxObserver):
    """torch.ao.quantization.MovingAverageMinMaxObserver on the device (``averaging_constant``, default 0.01)."""
    moving = True


class PerChannelMinMaxObserver(MinMaxObserver):
    """torch.ao.quantization.PerChannelMinMaxObserver on the device (``ch_axis``, default 0)."""
    per_channel = True


class MovingAveragePerChannelMinMaxObserver(MinMaxObserver):
    """torch.ao.quantization.MovingAveragePerChannelMinMaxObserver on the device."""
    moving = True
    per_channel = True
