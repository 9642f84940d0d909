"""rlx_gpu: deep-learning optimizers as WGSL compute shaders on any WebGPU adapter.

GPU optimizers: :class:`Adam`, :class:`AdamW`, :class:`SGD`, :class:`RMSprop`, :class:`Adagrad`, :class:`LAMB`,
:class:`NAdamW`, :class:`RAdam`, :class:`QHAdamW`, :class:`Lion`, :class:`SophiaH`, :class:`Mars`,
:class:`Adafactor` (float32, float16 or bfloat16 parameters), :class:`SparseAdam` (row-sparse grads,
:class:`RowSparse`), :class:`Muon` (2-D tensors; matrix algebra in :mod:`rlx_gpu.linalg`), :class:`StiefelSGD` (orthonormal columns), :class:`SOAP` and :class:`Kron` (2-D tensors); :class:`Partition` routes tensors to several of them. NumPy twins with the same API: :mod:`rlx_gpu.reference`.
Layers, each importing only those below it: ``core`` (pure Python), ``runtime`` (devices, transfers, arenas,
WGSL sources, pipelines), ``engine`` (the Optimizer surface), ``optim`` (one declaration per optimizer), and the
add-ons (:mod:`rlx_gpu.clip`, :mod:`rlx_gpu.amp`, :mod:`rlx_gpu.schedules`, :mod:`rlx_gpu.interop`,
:mod:`rlx_gpu.torch`) and tools (``bench``, ``check``, ``info``). Every optimizer also takes PyTorch CPU tensors
(``model.parameters()``) and then is a ``torch.optim.Optimizer`` (``rlx_gpu.torch.<Name>``,
:mod:`rlx_gpu.core.torchcontract`).
"""
from . import linalg, reference
from .addons import schedules
from .addons.amp import GradScaler
from .addons.partition import Partition
from .addons.clip import clip_grad_norm, global_grad_clip_scale, l2_norm
from .engine import Optimizer
from .addons.interop import from_torch_state_dict, to_torch_state_dict
from .core.sparse import RowSparse
from . import optim as _optim
from .runtime import Device, DeviceLostError, DeviceTensor, NoAdapterError, Program, adapters, get_device
from .runtime.implementation import implementation, set_implementation

__version__ = "0.2.0"
globals().update({_n: getattr(_optim, _n) for _n in _optim.__all__})
# the optimizers (derived: every declaration in rlx_gpu.optim), then the rest of the public surface
__all__ = list(_optim.__all__) + [
    "Partition", "RowSparse", "Optimizer", "DeviceTensor", "clip_grad_norm", "global_grad_clip_scale", "l2_norm",
    "GradScaler", "Device", "DeviceLostError", "NoAdapterError", "adapters", "get_device", "reference", "linalg",
    "to_torch_state_dict", "from_torch_state_dict", "Program", "set_implementation", "implementation"]


def __getattr__(name):
    """``rlx_gpu.torch`` (the torch.optim.Optimizer subclasses) is imported on first use: it imports torch."""
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'rlx_gpu' has no attribute {name!r}")
