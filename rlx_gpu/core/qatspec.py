"""The ``qat=`` option every optimizer takes: which tensors get a quantized copy written in each step, and how.

    qat={"fc1.weight": "int8", "fc2.weight": "int4/channel", "emb": "int8/values"}

A spec is ``int8`` or ``int4`` (symmetric codes in [-128, 127] / [-8, 7], zero point 0), then optionally
``/channel`` (one scale per index of axis 0, the output channel of an ``(out, in)`` weight; default one scale per
tensor) and ``/values`` or ``/values-bf16`` (the fake-quantized float32 / bfloat16 values as well as the codes). The
scales are torch.ao's symmetric qparams of the updated weights' own min/max (``MinMaxObserver.calculate_qparams``).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["QatSpec", "parse_qat"]


@dataclass(frozen=True)
class QatSpec:
    """One tensor's export: ``bits`` (8 or 4), ``per_channel`` (axis 0), ``values`` (None, "float32", "bfloat16")."""
    bits: int
    per_channel: bool = False
    values: str | None = None

    @property
    def qmin(self) -> int:
        return -(1 << (self.bits - 1))

    @property
    def qmax(self) -> int:
        return (1 << (self.bits - 1)) - 1


def _one(owner: str, name: str, spec) -> QatSpec:
    parts = spec.split("/") if isinstance(spec, str) else None
    bits = {"int8": 8, "int4": 4}.get(parts[0]) if parts else None
    rest = set(parts[1:]) if parts else set()
    ok = bits is not None and rest <= {"channel", "values", "values-bf16"} and len(rest) == len(parts) - 1 \
        and not {"values", "values-bf16"} <= rest
    if not ok:
        raise ValueError(f"{owner}: qat[{name!r}] must be 'int8' or 'int4', optionally followed by '/channel' and "
                         f"'/values' or '/values-bf16', got {spec!r}")
    values = "float32" if "values" in rest else "bfloat16" if "values-bf16" in rest else None
    return QatSpec(bits, "channel" in rest, values)


def parse_qat(owner: str, qat, shapes: dict) -> dict:
    """``{name: QatSpec}`` from the option (None or a dict name -> spec), checked against the tensors' shapes."""
    if qat is None:
        return {}
    if not isinstance(qat, dict):
        raise TypeError(f"{owner}: qat must be None or a dict name -> spec such as 'int8', got {type(qat).__name__}")
    out = {}
    for name, spec in qat.items():
        if name not in shapes:
            raise ValueError(f"{owner}: qat names {name!r}, which is not one of the parameters")
        s = _one(owner, name, spec)
        if s.per_channel and len(shapes[name]) < 1:
            raise ValueError(f"{owner}: qat[{name!r}] is per channel, but the tensor is 0-d")
        out[name] = s
    return out
