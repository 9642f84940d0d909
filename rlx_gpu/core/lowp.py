"""Precision: the three parameter dtypes, and rounding from float32 as the kernels do it, in NumPy.

``float32``, ``float16`` (NumPy's) and ``bfloat16`` (``ml_dtypes.bfloat16``, the dtype JAX and TensorFlow use;
NumPy has none). Arithmetic is float32 everywhere; a value is rounded only where it is stored in a 16-bit dtype:

* round to nearest even (:func:`round_rne`): bfloat16 as ``ml_dtypes`` (and torch) round, float16 as NumPy does
  (overflow to inf, NaN kept). The kernels do the same with integer operations on the bit pattern, so the GPU
  and the twin give identical bits.
* stochastic rounding (:func:`round_stochastic`): up with probability equal to the distance from the value below,
  in units of the spacing, so the expected stored value is the float32 value. The random bits are a counter-based
  hash of (``rounding_seed``, the tensor's step count, a hash of the tensor's name, the element's index in the
  tensor): independent of arena offsets, chunking and adapter, so a run is reproducible anywhere and the twin
  reproduces the kernels bit for bit (:func:`element_bits`, ``shaders/lowp.wgsl``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

try:
    import ml_dtypes
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    BFLOAT16 = None

__all__ = ["DType", "DTYPES", "dtype_of", "round_rne", "round_stochastic", "widen", "name_hash", "step_key",
           "step_keys", "element_bits", "as_bits", "from_bits"]


@dataclass(frozen=True)
class DType:
    """One storage dtype: its name, NumPy dtype and bytes per element."""
    name: str
    np: np.dtype
    itemsize: int

    @property
    def low(self) -> bool:
        """A 16-bit dtype: stored packed, two to a u32, rounded on every store."""
        return self.itemsize == 2

    def __str__(self):
        return self.name


F32 = DType("float32", np.dtype(np.float32), 4)
F16 = DType("float16", np.dtype(np.float16), 2)
BF16 = DType("bfloat16", BFLOAT16, 2)
DTYPES = {d.name: d for d in (F32, F16, BF16)}
_ALIASES = {"fp32": "float32", "f32": "float32", "fp16": "float16", "f16": "float16", "half": "float16",
            "bf16": "bfloat16"}


def dtype_of(x) -> DType | None:
    """The :class:`DType` of a name, a NumPy dtype, an array or a torch dtype; None if it is none of the three."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        return DTYPES.get(_ALIASES.get(x, x))
    name = getattr(x, "dtype", x)
    if type(name).__module__ == "torch":  # a torch.dtype, without importing torch
        return DTYPES.get(str(name).removeprefix("torch."))
    try:
        dt = np.dtype(name)
    except TypeError:
        return None
    for d in DTYPES.values():
        if d.np == dt:
            return d
    return None


def as_bits(a: np.ndarray) -> np.ndarray:
    """A 16-bit array's bit patterns (uint16 view), or the array itself for float32."""
    return a.view(np.uint16) if a.dtype.itemsize == 2 else a


def from_bits(bits: np.ndarray, dtype: DType) -> np.ndarray:
    return bits.view(dtype.np) if dtype.low else bits.astype(np.float32, copy=False)


def widen(a) -> np.ndarray:
    """Exactly as float32 (every float16 and bfloat16 value is a float32 value)."""
    return np.asarray(a).astype(np.float32)


def round_rne(x: np.ndarray, dtype: DType) -> np.ndarray:
    """float32 ``x`` stored in ``dtype``, rounded to nearest even (overflow gives inf, NaN stays NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, np.float32).astype(dtype.np)


# -- stochastic rounding ---------------------------------------------------------------------------------------
def _lowbias32(x: np.ndarray) -> np.ndarray:
    """Chris Wellons' lowbias32 integer hash (uint32 in, uint32 out); shaders/lowp.wgsl has the same."""
    x = np.asarray(x, np.uint32)
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def name_hash(name: str) -> int:
    """FNV-1a (32 bit) of the tensor name's UTF-8 bytes (lone surrogates kept), the name's part of the key."""
    h = 0x811C9DC5
    for b in name.encode("utf-8", "surrogatepass"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def step_key(seed: int, step: int, name_h: int) -> int:
    """The per-tensor, per-step part of the random bits (a record field; the host computes it)."""
    with np.errstate(over="ignore"):
        s = np.uint32(step & 0xFFFFFFFF) ^ _lowbias32(np.uint32((step >> 32) & 0xFFFFFFFF))
        k = _lowbias32(_seed32(seed) ^ _lowbias32(np.uint32(name_h) ^ _lowbias32(s)))
    return int(k)


def _seed32(seed: int) -> np.uint32:
    """A 64-bit seed folded to 32 bits (seeds below 2**32 are themselves)."""
    with np.errstate(over="ignore"):
        return np.uint32(seed & 0xFFFFFFFF) ^ _lowbias32(np.uint32((seed >> 32) & 0xFFFFFFFF))


def step_keys(seed: int, steps, name_hashes) -> np.ndarray:
    """:func:`step_key` for arrays of step counts and name hashes (uint32 keys)."""
    steps = np.asarray(steps, np.uint64)
    with np.errstate(over="ignore"):
        s = (steps & np.uint64(0xFFFFFFFF)).astype(np.uint32) ^ _lowbias32((steps >> np.uint64(32)).astype(np.uint32))
        return _lowbias32(_seed32(seed) ^ _lowbias32(np.asarray(name_hashes, np.uint32) ^ _lowbias32(s)))


def element_bits(key: int, n: int) -> np.ndarray:
    """32 random bits for each element index 0..n-1 of a tensor under ``key``."""
    with np.errstate(over="ignore"):
        return _lowbias32(np.uint32(key) ^ _lowbias32(np.arange(n, dtype=np.uint32)))


def round_stochastic(x: np.ndarray, dtype: DType, bits: np.ndarray) -> np.ndarray:
    """float32 ``x`` stored in 16-bit ``dtype``, rounded up with probability equal to its distance from the value
    below (in units of the spacing), using the uint32 ``bits`` per element. A value past the largest finite one of
    ``dtype``, inf and NaN are rounded to nearest: a finite value never rounds stochastically to inf."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32)
    sign, mag = u & np.uint32(0x80000000), u & np.uint32(0x7FFFFFFF)
    if dtype.name == "bfloat16":
        # add 16 random bits below bfloat16's last mantissa bit and truncate: the carry rounds up with the
        # probability of the dropped fraction (also across binades and for float32 denormals); from at most the
        # largest finite value 0x7F7F0000 the carry stays finite
        special = mag > np.uint32(0x7F7F0000)
        r = ((np.minimum(mag, np.uint32(0x7F7F0000)) + (bits & np.uint32(0xFFFF))) >> np.uint32(16)).astype(np.uint16)
        out = np.where(special, round_rne(x, dtype).view(np.uint16), r | (sign >> np.uint32(16)).astype(np.uint16))
        return out.astype(np.uint16).view(dtype.np)
    # float16: normal range (|x| >= 2**-14, up to 65504 = 0x477FE000) by the same carry trick on 13 dropped bits;
    # below it the spacing is 2**-24, so scale by 2**24 (exact), split into integer m and fraction f, and round up
    # when f > 1 - u for u the top 24 random bits in [0, 1) (so that, as with the carry, all-ones bits round up and
    # zero bits down)
    special = mag > np.uint32(0x477FE000)
    normal = mag >= np.uint32(0x38800000)
    t = (np.minimum(mag, np.uint32(0x477FE000)) + (bits & np.uint32(0x1FFF))) >> np.uint32(13)
    h_norm = t - np.uint32((127 - 15) << 10)
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.where(normal, np.float32(0), np.abs(x)) * np.float32(2.0 ** 24)
        m = np.floor(s)
        thresh = ((bits >> np.uint32(8)) ^ np.uint32(0xFFFFFF)).astype(np.float32) * np.float32(2.0 ** -24)
        h_sub = m.astype(np.uint32) + ((s - m) > thresh).astype(np.uint32)
    h = np.where(normal, h_norm, h_sub) | (sign >> np.uint32(16))
    out = np.where(special, round_rne(x, dtype).view(np.uint16).astype(np.uint32), h)
    return out.astype(np.uint16).view(dtype.np)
