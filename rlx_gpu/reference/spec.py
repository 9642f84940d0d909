"""The declaration side of a NumPy twin: defaults, state names and shapes, validation, the class registry. The GPU
class of the same optimizer reads these through its ``spec`` (the twin class)."""
from __future__ import annotations

import sys

from ..core import options as shared
from ..core.groups import MASTER, validate_group
from .sparse import SparseSpec



class Spec(SparseSpec):
    """What a twin class declares, and the class-level questions the GPU class asks of it (its ``spec``)."""

    #: Hyperparameter names and defaults (a bool default makes a flag, a tuple a pair of betas).
    defaults: dict = {}
    #: Every state buffer name this optimizer can have (torch's names).
    all_state_names: tuple = ()
    #: State buffers created for every tensor at construction (Adagrad's ``sum``).
    eager_state: tuple = ()
    #: States that are one number per tensor (0-d float32 arrays), kept on the host by the GPU class.
    scalar_states: tuple = ()
    #: States of another shape kept in float32 (Adafactor's factored moments); the rest are param-shaped and kept in
    #: ``state_dtype`` (the GPU class keeps them in arenas).
    aux_states: tuple = ()
    #: Hyperparameters that are learning rates (multiplied by ``lr_scale``).
    lr_keys: tuple = ("lr",)
    #: Keys torch.optim's class of the same algorithm keeps in its groups with a fixed value here (NAdamW is
    #: ``torch.optim.NAdam(decoupled_weight_decay=True)``): written into and checked in converted state dicts.
    torch_group_keys: dict = {}
    #: Those of them torch's class sets whatever a loaded state dict says (torch.optim.AdamW's
    #: ``decoupled_weight_decay``): a loaded value is replaced, not refused.
    torch_forced_keys: tuple = ()
    #: The class's own defaults of shared options (LAMB clips at apex's ``max_grad_norm=1.0``).
    option_defaults: dict = {}
    #: Whether a complex parameter (as its view_as_real, torch's way) is taken: the torch.optim algorithms whose
    #: torch steps complex tensors so; the others refuse them (torch's words, ``complex_refusal``'s type).
    supports_complex: bool = False
    complex_refusal = RuntimeError
    #: Constructor keywords beyond the hyperparameters and options (Kron's ``probe``), kept by copies.
    extra_kwargs: tuple = ()
    #: The states block quantization (``state_bits``) applies to, and whether each is signed (first moments,
    #: momenta) or not (second moments).
    quantizable: dict = {}
    on_device = False
    _classes: dict = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        Spec._classes.setdefault(cls.__name__, cls)
        cls.__signature__ = shared.signature(cls.defaults, gpu=False, overrides=cls.option_defaults)
        if cls.defaults and "Hyperparameters (defaults)" not in (vars(cls).get("__doc__") or ""):
            cls.__doc__ = _doc(cls)

    # -- the spec, shared with the GPU class ----------------------------------------------------
    @classmethod
    def typed_states(cls) -> tuple:
        """The param-shaped state buffers (kept in ``state_dtype``; arenas on the GPU)."""
        return tuple(s for s in cls.all_state_names if s not in cls.scalar_states + cls.aux_states)

    @classmethod
    def state_names(cls, group: dict) -> tuple:
        """The state buffers a tensor in ``group`` gets at its first step."""
        return cls.all_state_names

    @classmethod
    def state_shape(cls, state: str, shape: tuple) -> tuple:
        """The shape of state buffer ``state`` for a tensor of ``shape``."""
        return () if state in cls.scalar_states else tuple(shape)

    @classmethod
    def init_value(cls, state: str, group: dict) -> float:
        """The value a state buffer starts at."""
        return 0.0

    @classmethod
    def check(cls, group: dict) -> None:
        """Validation beyond what the defaults' types imply; raise ValueError."""

    @classmethod
    def check_param_values(cls, owner: str, params: dict) -> None:
        """New values for params (``write_params``, ``load_state_dict(params=)``, ``restore``), already of the right
        shapes and dtypes, that this optimizer cannot take: ValueError naming the tensor (StiefelSGD: off its
        manifold). Nothing by default."""

    @classmethod
    def validate(cls, group: dict, keys=None) -> None:
        """``group``'s values checked (only those of ``keys`` against their defaults' types and ranges, where the
        others were checked before), then :meth:`check`'s checks across them."""
        validate_group(cls.__name__, group, cls.defaults if keys is None else {k: cls.defaults[k] for k in keys})
        cls.check(group)

    @classmethod
    def optimizer_classes(cls) -> dict:
        return dict(Spec._classes)

    @classmethod
    def hyperparameters(cls) -> dict:
        return dict(cls.defaults)

    @classmethod
    def state_shape_of(cls, state: str, shape):
        """The shape of ``state``; None for a quantized state's codes, absmax and map (checked when loaded: they
        depend on the bits)."""
        base, _, part = state.rpartition("_")
        if base in cls.quantizable and part in ("codes", "absmax", "qmap"):
            return None
        return tuple(shape) if state == MASTER else cls.state_shape(state, shape)


def _doc(cls) -> str:
    """A twin's docstring: its own line, the update rule (its module's docstring), hyperparameters with their
    defaults, state names and the shared options, so that ``help()`` on a twin is enough to use it."""
    rule = (sys.modules[cls.__module__].__doc__ or "").strip()
    hyper = ", ".join(f"{k}={v!r}" for k, v in cls.defaults.items())
    return (f"{(cls.__doc__ or cls.__name__).strip()}\n\nThe NumPy twin of ``rlx_gpu.{cls.__name__}``: the same "
            f"constructor, ``step``, ``params`` (NumPy arrays), ``grads``, ``param_groups``, state dicts and "
            f"checkpoints; float32 NumPy in the kernel's order of operations.\n\n{rule}\n\n"
            f"Hyperparameters (defaults): {hyper}.\nState: step, {', '.join(cls.all_state_names)}."
            + shared.doc(gpu=False, overrides=cls.option_defaults))
