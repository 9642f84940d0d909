"""Block-quantized optimizer state: the maps, quantize/dequantize in NumPy (the specification the kernels follow bit
for bit), and state-dict conversion between quantized and float32 states.

8-bit (``state_bits=8``; Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization", as bitsandbytes):
blocks of 256 elements, one float32 absmax per block, codes of bitsandbytes' dynamic tree maps (signed for
first moments and momenta, unsigned for second moments). 4-bit (``state_bits=4``; Li et al. 2023, "Memory
Efficient Optimizers with 4-bit States", as torchao's AdamW4bit): blocks of 128, the 4-bit dynamic tree map for
signed states and the linear map without zero, linspace(0, 1, 17)[1:], for unsigned ones.

The rule. A block's scale ``a`` is the largest finite ``|v|`` of the block (infinities and NaN do not set it, so
one overflowing value cannot take the resolution of its finite neighbours). A value ``w`` gets the code of the
nearest map entry: the number of midpoints ``m_j`` (between map entries ``j`` and ``j+1``, rounded to float32)
with ``s * m_j < w``, where ``s = a`` (1 when ``a == 0``); a float32 product and a comparison, exact on every
adapter. A NaN gives code 0 (it is not kept: where a state turns NaN, the update of that step took the NaN and
made its param NaN). The block's stored absmax word is ``a`` with its sign bit as a flag:
  - signed maps: set when the block's largest magnitude is negative (a positive one wins a tie). The block is
    then stored negated (``w = -v``), so its extreme value is always the map's entry 1 (exact; the signed maps
    end at -0.99297 and -0.8875 below, at 1 above) and a code reads back as ``map[code] * absmax`` with the signed
    absmax. An infinity saturates to the extreme entry (``+-|a|``, or ``-0.99297 * |a|`` past the other end).
  - unsigned maps (second moments): set when the block holds ``+inf``. In such a block code 0 reads back as
    ``+inf`` and every other value gets a code >= 1; else a code reads back as ``map[code] * |a|``. The 8-bit map
    starts at 0: a positive value always gets a code >= 1 (it never reads back as 0, which would make
    ``m / (sqrt(v) + eps)`` jump; the 4-bit map has no zero).
Zero codes with a zero absmax are a zero state. Dequantizing and quantizing again gives back the same codes and
absmax (every block's extreme is an exact map entry times its absmax).
"""
from __future__ import annotations

import numpy as np

from . import qmaps

__all__ = ["BLOCK", "qmap", "midpoints", "quantize", "dequantize", "pack_codes", "unpack_codes", "num_blocks",
           "QKEYS", "check_state_bits", "stored_codes", "element_codes", "FLAG", "INF_BITS"]

BLOCK = {8: 256, 4: 128}
QKEYS = ("_codes", "_absmax", "_qmap")  # a quantized state s is kept as s_codes, s_absmax and s_qmap
FLAG, INF_BITS = np.uint32(0x80000000), np.uint32(0x7f800000)  # the absmax word's flag; the bits of +inf
_MAPS = {(8, True): qmaps.SIGNED_8, (8, False): qmaps.UNSIGNED_8, (4, True): qmaps.SIGNED_4,
         (4, False): qmaps.UNSIGNED_4}
_cache: dict = {}


def qmap(bits: int, signed: bool) -> np.ndarray:
    """The map of ``bits``-bit codes (float32, ascending, 2**bits entries)."""
    key = ("map", bits, signed)
    if key not in _cache:
        words = np.array([int(w, 16) for w in _MAPS[(bits, signed)].split()], np.uint32)
        _cache[key] = words.view(np.float32)
        _cache[key].flags.writeable = False
    return _cache[key]


def midpoints(bits: int, signed: bool) -> np.ndarray:
    """The 2**bits - 1 decision points between neighbouring map entries, in float32."""
    key = ("mid", bits, signed)
    if key not in _cache:
        m = qmap(bits, signed).astype(np.float64)
        _cache[key] = ((m[:-1] + m[1:]) / 2).astype(np.float32)
        _cache[key].flags.writeable = False
    return _cache[key]


def num_blocks(n: int, bits: int) -> int:
    """The number of quantization blocks of a tensor of ``n`` elements."""
    return -(-int(n) // BLOCK[bits])


def _search(w: np.ndarray, scale: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    """The count of midpoints m with scale * m < w, by the kernels' branchless binary search (int64)."""
    mids = midpoints(bits, signed)
    M = mids.size
    codes = np.zeros(w.size, np.int64)
    step = (M + 1) // 2
    with np.errstate(invalid="ignore", over="ignore"):
        while step:
            idx = codes + step - 1
            ok = idx < M
            codes += step * (ok & (scale * mids[np.minimum(idx, M - 1)] < w))
            step //= 2
    return codes


def quantize(x: np.ndarray, bits: int, signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """(codes: uint8 of x's shape, absmax words as float32 per block) of a float32 array, blockwise over its flat
    elements (the rule: the module's docstring)."""
    flat = np.asarray(x, np.float32).reshape(-1)
    n, B = flat.size, BLOCK[bits]
    nb = num_blocks(n, bits)
    padded = np.zeros(nb * B, np.float32)
    padded[:n] = flat
    u = padded.view(np.uint32)
    mag = u & ~FLAG
    fin = np.where(mag >= INF_BITS, np.uint32(0), mag)  # the finite magnitudes
    if signed:  # the largest magnitude, and in the low bit whether it is positive (sign bit clear)
        key = ((fin << np.uint32(1)) | ((~u) >> np.uint32(31))).reshape(nb, B).max(axis=1, initial=0)
        flag = ((key & 1) == 0) & (key > 1)
        amag = key >> np.uint32(1)
    else:
        amag = fin.reshape(nb, B).max(axis=1, initial=0)
        flag = (u == INF_BITS).reshape(nb, B).any(axis=1)
    words = (amag | np.where(flag, FLAG, np.uint32(0))).astype(np.uint32)
    a = amag.view(np.float32)
    scale = np.repeat(np.where(a == 0, np.float32(1), a), B)[:n].astype(np.float32)
    flagged = np.repeat(flag, B)[:n]
    w = np.where(flagged, -flat, flat) if signed else flat
    codes = _search(w, scale, bits, signed)
    if not signed:
        if qmap(bits, signed)[0] == 0:
            codes = np.where(w > 0, np.maximum(codes, 1), codes)  # a positive value never reads back as 0
        codes = np.where(flagged, np.where(w == np.inf, 0, np.maximum(codes, 1)), codes)
    return codes.astype(np.uint8).reshape(np.shape(x)), words.view(np.float32)


def dequantize(codes: np.ndarray, absmax: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    """The float32 values of ``codes`` (one per element, any shape) with per-block absmax words ``absmax``."""
    c = np.asarray(codes).reshape(-1).astype(np.int64)
    words = np.repeat(np.asarray(absmax, np.float32).view(np.uint32), BLOCK[bits])[:c.size]
    m = qmap(bits, signed)[c]
    with np.errstate(invalid="ignore", over="ignore"):
        if signed:
            v = m * words.view(np.float32)
        else:
            v = m * (words & ~FLAG).view(np.float32)
            v = np.where(((words & FLAG) != 0) & (c == 0), np.float32(np.inf), v)
    return v.astype(np.float32).reshape(np.shape(codes))


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes (uint8, one per element) as the device stores them: bytes (8-bit) or two per byte, low nibble first."""
    c = np.asarray(codes, np.uint8).reshape(-1)
    if bits == 8:
        return c
    if c.size % 2:
        c = np.concatenate([c, np.zeros(1, np.uint8)])
    return (c[0::2] | (c[1::2] << 4)).astype(np.uint8)


def unpack_codes(packed: np.ndarray, n: int, bits: int) -> np.ndarray:
    """The first ``n`` codes (uint8, one per element) of :func:`pack_codes`'s bytes."""
    p = np.asarray(packed, np.uint8).reshape(-1)
    if bits == 8:
        return p[:n].copy()
    out = np.empty(2 * p.size, np.uint8)
    out[0::2], out[1::2] = p & 15, p >> 4
    return out[:n]


def stored_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes as a state dict holds them: 8-bit in the param's shape, 4-bit packed two per byte (flat, low nibble
    first, ``ceil(n / 2)`` bytes)."""
    return np.array(codes, np.uint8) if bits == 8 else pack_codes(codes, 4)


def element_codes(stored: np.ndarray, shape, bits: int) -> np.ndarray:
    """:func:`stored_codes` back to one code per element, in ``shape``."""
    if bits == 8:
        return np.asarray(stored, np.uint8).reshape(shape)
    return unpack_codes(stored, int(np.prod(shape, dtype=np.int64)), 4).reshape(shape)
def check_state_bits(owner: str, quantizable: dict, opts: dict) -> None:
    """``state_bits`` / ``min_quantized_size`` checked against what the optimizer supports."""
    bits, mq = opts["state_bits"], opts["min_quantized_size"]
    if bits is not None and (isinstance(bits, bool) or bits not in (4, 8)):
        raise ValueError(f"{owner}: state_bits must be None, 8 or 4, got {bits!r}")
    if bits is not None and not quantizable:
        raise ValueError(f"{owner}: state_bits={bits} is not supported; block-quantized states are available on "
                         "Adam, AdamW, Lion, SGD (momentum) and RMSprop")
    if isinstance(mq, bool) or not isinstance(mq, (int, np.integer)) or mq < 0:
        raise ValueError(f"{owner}: min_quantized_size must be an int >= 0, got {mq!r}")


# -- state dicts ------------------------------------------------------------------------------------------------
def entries(s: str, codes, absmax, bits: int, signed: bool) -> dict:
    """A quantized state as a state dict holds it: ``s_codes`` (uint8: 8-bit one code per element in the param's
    shape, 4-bit two per byte: :func:`stored_codes`), ``s_absmax`` (float32 words per block, the sign bit a flag:
    the module's docstring) and ``s_qmap`` (the map, float32). ``codes``: one per element."""
    return {s + "_codes": stored_codes(codes, bits), s + "_absmax": np.array(absmax, np.float32),
            s + "_qmap": qmap(bits, signed).copy()}


def split_state(owner: str, sd: dict, quantizable: dict, bits_of, shapes: dict, state_dtype=None) -> tuple[dict, dict]:
    """A state dict's quantized entries taken out and checked, before the rest is checked as usual.

    Returns ``(sd without them, {name: {state: (codes, absmax)}})``: entries whose tensor this optimizer quantizes
    with the same bits are kept as codes; the others are dequantized into float32 ``state`` entries (so a state dict
    moves between quantized and float32 optimizers in both directions); codes come out one per element in the
    param's shape (4-bit codes are taken packed, or one per byte as checkpoint format 3 held them).
    ``bits_of(name)``: 0, 8 or 4; ``state_dtype(state, name)``: the dtype a dequantized state is kept in (rounded
    to nearest even)."""
    where = f"{owner}.load_state_dict"
    if not isinstance(sd, dict) or not isinstance(sd.get("state"), dict):
        return sd, {}
    state, qstate = {}, {}
    for name, st in sd["state"].items():
        if not isinstance(st, dict) or not any(s + k in st for s in quantizable for k in QKEYS):
            state[name] = st
            continue
        st = dict(st)
        for s, signed in quantizable.items():
            got = [s + k in st for k in QKEYS]
            if not any(got):
                continue
            if not all(got):
                raise ValueError(f"{where}: {name!r} has some of {[s + k for k in QKEYS]} but not all")
            codes, absmax, m = (st.pop(s + k) for k in QKEYS)
            bits, codes = _check_entries(where, name, s, codes, absmax, m, signed, shapes.get(name))
            if s in st:
                raise ValueError(f"{where}: {name!r} holds both {s!r} and {s}_codes")
            if bits_of(name) == bits:
                qstate.setdefault(name, {})[s] = (codes, np.array(absmax, np.float32))
            else:
                v = dequantize(codes, absmax, bits, signed)
                st[s] = v if state_dtype is None else v.astype(state_dtype(s, name))
        state[name] = st
    return dict(sd, state=state), qstate


def _check_entries(where, name, s, codes, absmax, m, signed, shape) -> tuple[int, np.ndarray]:
    """(bits, codes one per element) of a quantized state's entries, every array checked."""
    for k, v in ((s + "_codes", codes), (s + "_absmax", absmax), (s + "_qmap", m)):
        if not isinstance(v, np.ndarray):
            raise TypeError(f"{where}: {k} of {name!r} must be a NumPy array, got {type(v).__name__}")
    bits = {256: 8, 16: 4}.get(m.size)
    if bits is None or m.dtype != np.float32 or not np.array_equal(m, qmap(bits, signed)):
        kind = "signed" if signed else "unsigned"
        raise ValueError(f"{where}: {s}_qmap of {name!r} is not the {kind} 8-bit or 4-bit map this library uses")
    shape = np.shape(codes) if shape is None else tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    packed = ((n + 1) // 2,)
    layouts = [shape] if bits == 8 else [packed, shape]  # 4-bit: packed, or one per byte (format 3)
    if codes.dtype != np.uint8 or codes.shape not in layouts:
        want = " or ".join(map(str, layouts))
        raise ValueError(f"{where}: {s}_codes of {name!r} must be uint8 of shape {want}, got {codes.dtype} "
                         f"{codes.shape}")
    if bits == 4 and codes.shape == packed and (codes.shape != shape or n == 0):
        if n % 2 and codes[-1] >> 4:
            raise ValueError(f"{where}: {s}_codes of {name!r} has a nonzero padding nibble after its {n} codes")
        codes = unpack_codes(codes, n, 4).reshape(shape)
    elif codes.size and int(codes.max()) >= 2 ** bits:
        raise ValueError(f"{where}: {s}_codes of {name!r} holds codes >= {2 ** bits} for a {bits}-bit map")
    nb = num_blocks(n, bits)
    if absmax.dtype != np.float32 or absmax.shape != (nb,):
        raise ValueError(f"{where}: {s}_absmax of {name!r} must be float32 of shape ({nb},), got "
                         f"{absmax.dtype} {absmax.shape}")
    return bits, np.array(codes, np.uint8)


def join_state(state: dict, qstate: dict, quantizable: dict, bits_of) -> dict:
    """After the check: float32 entries of quantized tensors quantized (``load_state_dict`` quantizes); returns
    ``{name: {state: (codes, absmax)}}`` with ``qstate``'s entries, and takes those states out of ``state``."""
    out = {n: dict(v) for n, v in qstate.items()}
    for name, st in state.items():
        bits = bits_of(name)
        if not bits:
            continue
        for s, signed in quantizable.items():
            if s in st:
                out.setdefault(name, {})[s] = quantize(np.asarray(st.pop(s), np.float32), bits, signed)
    return out


# -- the kernels' search guide ------------------------------------------------------------------------------------
GUESS_BITS = 6  # mantissa bits of x = v / absmax in a guide key
GUESS_KEYS = 24 * 2 ** GUESS_BITS + 2  # per sign: |x| < 2^-24, 24 binades up to 1, then |x| >= 1


def _key_ranges():
    """(lowest, highest) |x| of every key (float32)."""
    k = np.arange(1, GUESS_KEYS - 1, dtype=np.int64)
    lo = (((k - 1) + (103 << GUESS_BITS)) << (23 - GUESS_BITS)).astype(np.uint32)
    hi = lo + np.uint32((1 << (23 - GUESS_BITS)) - 1)
    return (np.concatenate([[0.0], lo.view(np.float32), [1.0]]).astype(np.float32),
            np.concatenate([[2.0 ** -24], hi.view(np.float32), [1.0]]).astype(np.float32))


def guess_table(bits: int, signed: bool) -> np.ndarray:
    """The code of ``x = v / absmax`` at the middle of each key (sign, exponent, top GUESS_BITS mantissa bits of x),
    as uint8 (positive keys, then negative). The kernels take it and step once up or down to the exact code (the
    count of ``absmax * midpoint < v``): checked here, every x of a key, a few ulps of rounding either side, is
    within one code of its key's guess."""
    lo, hi = _key_ranges()
    centre = ((lo.astype(np.float64) + hi) / 2).astype(np.float32)
    mids = midpoints(bits, signed)
    out = []
    for sgn in (1, -1):
        g = np.searchsorted(mids, sgn * centre, side="left")
        for edge in (lo * np.float32(1 - 2 ** -21), hi * np.float32(1 + 2 ** -21)):
            far = np.abs(np.searchsorted(mids, sgn * edge, side="left") - g)
            assert far.max() <= 1, (bits, signed, sgn, int(far.max()))
        out.append(g)
    return np.concatenate(out).astype(np.uint8)
