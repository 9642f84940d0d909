"""``rlx-gpu bench``: every optimizer against the memory-bandwidth floor, torch and its NumPy twin, in one run.

For each optimizer x precision x param set: the GPU time per step (timestamp queries where the adapter has them,
else a synchronised wall clock), the bytes the step must move at least, GB/s and the fraction of the device's
copy bandwidth measured in the same run; torch's fastest implementation on the same shapes and dtype when torch
with CUDA is importable; the NumPy twin; the host path; the wall clock of small steps; the first-step latency.
Modules: ``shapes`` (optimizers, precisions, param sets, bytes), ``rows`` (which rows run on which tensors, and how
each is built), ``timing``, ``baselines``, ``run``, ``progress``, ``report``, ``cli``.
"""
from .cli import adapter_defaults, main, parse_args
from .progress import Progress, clock
from .report import svg_plot, table
from .shapes import DEFAULT_SETS, OPTIMIZERS, PRECISIONS, gpt2_shapes, min_bytes, param_set, scale_shapes
from .timing import COPY_VARIANTS, Timer, copy_bandwidth

__all__ = ["main", "parse_args", "adapter_defaults", "Progress", "clock", "table", "svg_plot", "OPTIMIZERS", "PRECISIONS", "DEFAULT_SETS", "param_set",
           "gpt2_shapes", "scale_shapes", "min_bytes", "Timer", "copy_bandwidth", "COPY_VARIANTS"]
