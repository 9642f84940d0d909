"""Running ``shaders/qat_kernels.wgsl``: operands (NumPy arrays uploaded, float32 DeviceTensors bound in place),
the argument words, per-channel quantization parameters on the device (:class:`QParams`), results of the kind
given."""
from __future__ import annotations

import numpy as np

from ...linalg import _standalone
from ...runtime.arena import DeviceTensor
from ...runtime.device import get_device
from ...runtime.kernels import grid, shipped_kernel
from ...runtime.params import Params, declare

__all__ = ["QParams", "Operand", "operand", "run", "args_words", "variant", "FAST", "PER_CHANNEL", "E5M2",
           "SATURATE", "MOVING", "SYMMETRIC"]

F32 = np.float32
PER_CHANNEL, E5M2, SATURATE, MOVING, SYMMETRIC = 1, 2, 4, 8, 16  # (bit 31: NOFUSE in the WGSL, never set)
WG, EPT = 256, 4
SHADER = "qat_kernels.wgsl"
#: Run the fake-quant kernels' vectorised entries (``fq_affine_v``, ``fq_fp8_v``: loads before compute, no integer
#: division per element; the same bits); False runs the first ones (what ``benchmarks/qat_bench.py`` compares). Off:
#: on the H200 the vectorised entries ran slower (0.56-0.60 of copy against 0.64-0.69; PERF_NOTES 57).
FAST = False
VECTORISED = {"fq_affine": "fq_affine_v", "fq_fp8": "fq_fp8_v"}
# The kernels' arguments, read by name in qat_kernels.wgsl (``args.qmin``): the elements, channels, elements per
# channel run, flags, the quantized range, the LSQ grad factor, the observers' averaging constant, eps and the zero
# point of a symmetric scheme.
QAT_ARGS = Params("QatArgs", "n", "channels", "inner", "flags", "qmin:f32", "qmax:f32", "grad_factor:f32",
                  "averaging:f32", "eps:f32", "sym_zp:f32")
# A channel's quantization parameters, read by name in qat_kernels.wgsl (``qp[c].inv_scale``): 16 bytes (``pad``
# keeps the vec4 stride the observers and the export were written for).
QPARAM = Params("QParam", "scale:f32", "inv_scale:f32", "zero_point:f32", "pad:f32")
declare(SHADER, QAT_ARGS, QPARAM)


class QParams:
    """Quantization parameters on the device: per channel a :data:`QPARAM` (scale, 1/scale, zero point; 16 bytes;
    an observer's, or uploaded by :meth:`upload`). ``numpy()`` gives ``(scale float32, zero_point int64)``."""

    def __init__(self, device, channels: int, label: str = "qat.qparams"):
        self.device, self.channels = device, int(channels)
        self.buffer = device.buffer(QPARAM.nbytes * max(1, self.channels), label)

    @classmethod
    def upload(cls, device, scale, zero_point) -> "QParams":
        s = np.asarray(scale, F32).reshape(-1)
        z = np.asarray(zero_point, np.int64).reshape(-1)
        q = cls(device, s.size)
        # (1.0f / scale: torch's inverse)
        words = QPARAM.pack_rows(scale=s, inv_scale=F32(1) / s, zero_point=z.astype(F32), pad=0.0)
        device.queue.write_buffer(q.buffer, 0, words)
        return q

    def numpy(self):
        w = self.device.read(self.buffer, 0, QPARAM.nbytes * self.channels,
                             out=np.empty((self.channels, QPARAM.words), F32))
        return w[:, QPARAM.offset("scale") // 4].copy(), w[:, QPARAM.offset("zero_point") // 4].astype(np.int64)

    def binding(self) -> dict:
        """``{"buffer", "offset", "size"}``: ``array<QParam>`` (:data:`QPARAM`) per channel."""
        return {"buffer": self.buffer, "offset": 0, "size": self.buffer.size}


class Operand:
    """A float32 tensor on the device: (buffer, byte offset, bytes bound: whole vec4s), its shape and device;
    ``host`` is True for an uploaded NumPy array."""

    def __init__(self, buf, offset, shape, device, host):
        self.buf, self.offset, self.shape, self.device, self.host = buf, offset, tuple(shape), device, host
        self.n = int(np.prod(self.shape, dtype=np.int64))
        self.size = max(16, -(-4 * self.n // 16) * 16)

    def res(self):
        return self.buf, self.offset, self.size


def _range(who: str, name: str, x, device, shape) -> Operand:
    """A float32 range of a buffer of ``device``: a ``{"buffer", "offset", "size"}`` dict, a ``(buffer, offset,
    size)`` tuple or a whole wgpu buffer, holding ``shape`` (default: ``size / 4`` elements)."""
    buf, off, size = (x["buffer"], x["offset"], x["size"]) if isinstance(x, dict) else x if isinstance(x, tuple) \
        else (x, 0, x.size)
    if device is None:
        raise ValueError(f"{who}: {name} is a buffer range: pass device= (the rlx_gpu Device that owns the buffer)")
    shape = (int(size) // 4,) if shape is None else tuple(int(d) for d in shape)
    o = Operand(buf, int(off), shape, device, False)
    if 4 * o.n > size or off + o.size > buf.size or off % 16:
        raise ValueError(f"{who}: {name} ({size} bytes at offset {off} of a {buf.size}-byte buffer) cannot hold "
                         f"shape {shape} as whole vec4s at a 16-byte aligned offset")
    return o


def operand(who: str, name: str, x, device=None, shape=None) -> Operand:
    """``x`` (a float32 NumPy array, uploaded, or a float32 DeviceTensor in one binding, or with ``shape`` a
    buffer range: :func:`_range`) as an :class:`Operand`."""
    if isinstance(x, (dict, tuple)) or (hasattr(x, "usage") and hasattr(x, "size")):
        return _range(who, name, x, device, shape)
    if isinstance(x, DeviceTensor):
        if x.dtype != np.float32:
            raise TypeError(f"{who}: {name} is a DeviceTensor of {x.dtype}, expected float32")
        b = x.bindings()
        if len(b) != 1:
            raise ValueError(f"{who}: {name} ({x.name!r}) is split over {len(b)} storage bindings; pass a tensor "
                             "within the adapter's max storage binding")
        if device is not None and x.device.device is not device.device:
            raise ValueError(f"{who}: {name} is on {x.device.name}, another operand on {device.name}")
        return Operand(b[0]["buffer"], b[0]["offset"], x.shape, x.device, False)
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError(f"{who}: {name} must be a float32 NumPy array or DeviceTensor, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    dev = device or get_device(None)
    flat = np.zeros(-(-max(x.size, 1) // 4) * 4, F32)
    flat[:x.size] = x.reshape(-1)
    return Operand(dev.buffer(flat.nbytes, f"qat.{name}", data=flat), 0, x.shape, dev, True)


def args_words(n, channels=1, inner=None, flags=0, qmin=0.0, qmax=0.0, grad_factor=1.0, averaging=0.0, eps=0.0,
               sym_zp=0.0) -> np.ndarray:
    """The kernels' ``args`` (:data:`QAT_ARGS`), in the 16 words of their buffers."""
    w = np.zeros(16, np.uint32)
    w[:len(QAT_ARGS.fields)] = QAT_ARGS.pack(n=n, channels=max(1, channels), inner=max(1, n if inner is None else inner),
                                             flags=flags, qmin=qmin, qmax=qmax, grad_factor=grad_factor,
                                             averaging=averaging, eps=eps, sym_zp=sym_zp)
    return w


def groups(n: int) -> int:
    return max(1, -(-n // (4 * WG * EPT)))


def variant(entry: str, fast: bool | None = None) -> str:
    """The entry point that runs ``entry``: its vectorised twin where there is one and ``fast`` (default
    :data:`FAST`)."""
    return VECTORISED.get(entry, entry) if (FAST if fast is None else fast) else entry


def dispatch(enc, dev, entry: str, n_groups: int, kernel=None, **bufs) -> None:
    """Record one dispatch of ``entry`` with buffers by binding name ((buffer, offset, size) or a buffer);
    ``kernel``: a compiled Kernel in place of the shipped one (benchmarks/qatdiag.py's rewrites)."""
    k = kernel or shipped_kernel(dev, SHADER, entry, WG=WG, EPT=EPT)
    full = {}
    for name in k.bindings:
        b = bufs.get(name)
        full[name] = b if isinstance(b, tuple) else (b, 0, b.size)
    x, y = grid(n_groups, dev.max_workgroups)
    p = enc.begin_compute_pass()
    p.set_pipeline(k.pipeline)
    p.set_bind_group(0, k.bind(full))
    p.dispatch_workgroups(x, y, 1)
    p.end()


def run(who: str, entry: str, x: Operand, words: np.ndarray, qp=None, dy: Operand | None = None, partials=False):
    """One elementwise kernel over ``x``: the result (and with ``partials`` the buffer of per-workgroup sums) as
    the kind ``x`` came in: a NumPy array or a new DeviceTensor."""
    dev = x.device
    out = _standalone(dev, x.shape if x.n else (1,), f"qat.{entry}")
    r = out.binding()
    ng = groups(x.n)
    bufs = {"args": dev.buffer(64, "qat.args", data=words), "xin": x.res(), "yout": (r["buffer"], r["offset"],
                                                                                  max(16, -(-r["size"] // 16) * 16)),
            "qp": qp.buffer if qp is not None else dev.buffer(16, "qat.qp"),
            "dyin": dy.res() if dy is not None else x.res()}
    part = dev.buffer(8 * ng, "qat.partials") if partials else None
    if part is not None:
        bufs["part"] = part
    enc = dev.encoder()
    dispatch(enc, dev, variant(entry), ng, **bufs)
    if part is not None:
        dispatch(enc, dev, "lsq_sum", 1, args=dev.buffer(64, "qat.args", data=args_words(ng)), part=part)
    dev.submit(enc)
    sums = dev.read(part, 0, 8, out=np.empty(2, F32)) if part is not None else None
    if not x.n:
        res = np.zeros(x.shape, F32) if x.host else out
    else:
        res = out.numpy().reshape(x.shape) if x.host else out.reshape(x.shape)
    return res, sums
