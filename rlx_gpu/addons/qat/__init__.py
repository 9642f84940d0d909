"""Quantization-aware training on the device (``rlx_gpu.qat``): fake quantization named as torch names it
(:mod:`.functions`), its straight-through and learnable (LSQ) gradients, min/max observers (:mod:`.observers`)
and :class:`QParams` (quantization parameters kept on the device). WGSL kernels include ``shaders/qat.wgsl`` for
the same functions (:func:`wgsl`). The optimizers' ``qat=`` option exports quantized copies in the step itself
(:mod:`rlx_gpu.engine.qat`). The spec: :mod:`rlx_gpu.reference.qat` and :mod:`rlx_gpu.reference.qat_observers`."""
from .functions import (fake_quantize_fp8, fake_quantize_per_channel_affine, fake_quantize_per_tensor_affine,
                        lsq_backward, ste_backward, ste_backward_fp8, ste_backward_per_channel)
from .kernels import QParams
from .observers import (MinMaxObserver, MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver,
                        PerChannelMinMaxObserver)

__all__ = ["fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine", "fake_quantize_fp8",
           "ste_backward", "ste_backward_per_channel", "ste_backward_fp8", "lsq_backward", "QParams",
           "MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
           "MovingAveragePerChannelMinMaxObserver", "wgsl"]


def wgsl() -> str:
    """The text of ``shaders/qat.wgsl`` (its functions, no bindings) to put in front of your own kernel's source:
    ``rlx_gpu.Program(dev, rlx_gpu.qat.wgsl() + MY_KERNEL, "main")``."""
    from ...runtime.source import load_source
    return load_source("qat.wgsl")
