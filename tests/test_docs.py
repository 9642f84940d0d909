"""Every public name is documented: help() on it says what it does; an optimizer's docstring names every
hyperparameter (the twins' also give each default) and the options every optimizer shares."""
import inspect

import pytest

import rlx_gpu
import rlx_gpu.reference as R
import rlx_gpu.schedules as S
from rlx_gpu.core.options import OPTIONS

PUBLIC = ([(rlx_gpu, n) for n in rlx_gpu.__all__] + [(R, n) for n in R.__all__]
          + [(S, n) for n in dir(S) if not n.startswith("_") and inspect.getmodule(getattr(S, n)) is S])


@pytest.mark.parametrize("mod,name", PUBLIC, ids=[f"{m.__name__}.{n}" for m, n in PUBLIC])
def test_public_name_has_a_docstring(mod, name):
    doc = inspect.getdoc(getattr(mod, name)) or ""
    assert len(doc) >= 40, f"{mod.__name__}.{name}: {doc!r}"


OPTIMIZERS = [n for n in rlx_gpu.__all__ if isinstance(getattr(rlx_gpu, n), type)
              and issubclass(getattr(rlx_gpu, n), rlx_gpu.Optimizer) and n != "Optimizer"]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_docstrings_name_hyperparameters_and_options(name):
    gpu, twin = getattr(rlx_gpu, name), getattr(R, name)
    for cls in (gpu, twin):
        doc = inspect.getdoc(cls)
        for h in twin.defaults:
            assert h in doc, f"{cls.__module__}.{name} does not mention {h}"
        for o in OPTIONS:
            if cls is gpu or not o.gpu_only:
                assert o.name in doc, f"{cls.__module__}.{name} does not mention the option {o.name}"
    for h, v in twin.defaults.items():
        assert f"{h}={v!r}" in inspect.getdoc(twin)


def test_torch_classes_are_documented():
    pytest.importorskip("torch", reason="rlx_gpu.torch needs torch")
    import rlx_gpu.torch as T
    for name in T.__all__:
        assert "torch.optim.Optimizer" in getattr(T, name).__doc__
