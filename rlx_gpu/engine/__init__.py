"""The engine: the :class:`Optimizer` surface, typed buckets of arenas, records of named fields, passes (a
generated elementwise driver per pass, per-tensor and custom passes), the checked-step gate, the gradient-norm
reductions and :class:`StepGroup` (several optimizers in one submission). Optimizers (``rlx_gpu.optim``) are declarations on top of it."""
from .codegen import Pass
from .joint import StepGroup
from .optimizer import Optimizer
from .records import Record
from .tables import by_step

__all__ = ["Optimizer", "Pass", "Record", "StepGroup", "by_step"]
