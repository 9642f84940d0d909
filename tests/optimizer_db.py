"""One row per elementwise optimizer: everything the generic tests need to know about it, in one place (as torch's
``optim_db``). ``tests/cases.py`` (the option sets every generic test runs), ``tests/test_convergence.py``'s table,
``tests/test_errors.py``'s bad hyperparameters, ``tests/test_mixed_precision.py``'s bounds and the optimizer pages
of the docs (``docs/facts.py``) are all read from here. The constructor, the twin and the hyperparameters' defaults
are the declaration's (``rlx_gpu.<name>``, ``rlx_gpu.reference.<name>``, the twin's ``defaults``); a row adds what
only the tests know.

A new elementwise optimizer joins every generic test, the error tests, the convergence tests and the docs with one
row here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import rlx_gpu


@dataclass(frozen=True)
class Row:
    """What the tests know about one optimizer.

    name: the class's name in ``rlx_gpu`` and in ``rlx_gpu.reference``.
    option_sets: the option sets every generic test runs (GPU against twin, state dicts, precisions, extremes).
    group2: hyperparameters valid for a second param group.
    bad_hyper: ``(kwargs, message)``: an invalid hyperparameter and the error both classes give (torch's words).
    parabola: (options, tolerance on |x - C|_inf after 400 steps) for the parabola 0.5|x - C|^2 from 0.
    rosenbrock: (options, tolerance on f after 1500 steps) from (-1, 1), or None (not expected to get there).
    paper, peer: the docs page's paper and the implementation whose semantics it follows.
    oracle: what the twin is checked against beyond the GPU (``"torch:<class>"``: torch.optim's, ``"formula"``: a
        float64 transcription in tests/test_reference.py, or a name of docs/facts.py's own rows).
    reduces: whether a pass sums over a tensor (its 16-bit results may differ in the order of a sum: 4 ULPs).
    diverging: whether a last-bit difference may turn into a larger one (a sign, a clamp: 1% of the elements of a
        16-bit test may lie outside the bound off the CPU adapter; tests/test_mixed_precision.py says why).
    matrix_form: the convergence problems are given as a 1 x n matrix (the optimizer's rule is for matrices).
    denormal_hyper: options that keep the extreme-value tests' denormal cases meaningful.
    """
    name: str
    option_sets: list
    group2: dict
    bad_hyper: list
    parabola: tuple
    rosenbrock: tuple | None
    paper: str
    peer: str
    oracle: str = "formula"
    reduces: bool = False
    diverging: bool = False
    matrix_form: bool = False
    denormal_hyper: dict = field(default_factory=dict)

    @property
    def gpu(self) -> type:
        return getattr(rlx_gpu, self.name)

    @property
    def twin(self) -> type:
        return getattr(rlx_gpu.reference, self.name)

    @property
    def defaults(self) -> dict:
        return dict(self.twin.defaults)


NAN, INF = math.nan, math.inf

DB = [
    Row("Adam", [{}, {"weight_decay": 0.1}, {"amsgrad": True}, {"maximize": True},
                 {"amsgrad": True, "weight_decay": 0.05, "maximize": True, "betas": (0.8, 0.99)}],
        {"lr": 3e-3, "betas": (0.5, 0.9), "weight_decay": 0.2},
        [({"lr": -1.0}, "Invalid learning rate: -1.0"), ({"lr": NAN}, "Invalid learning rate: nan"),
         ({"lr": INF}, "Invalid learning rate: inf"), ({"betas": (1.0, 0.999)}, "Invalid beta parameter at index 0: 1.0"),
         ({"eps": -1e-8}, "Invalid epsilon value: -1e-08")],
        ({"lr": 0.05}, 1e-2), ({"lr": 2e-2}, 1e-2),
        "Kingma & Ba 2014, [Adam: A Method for Stochastic Optimization](https://arxiv.org/abs/1412.6980)",
        "`torch.optim.Adam`", oracle="torch:Adam"),
    Row("AdamW", [{}, {"weight_decay": 0.0}, {"amsgrad": True}, {"maximize": True, "eps": 1e-3}],
        {"lr": 3e-3, "weight_decay": 0.3, "amsgrad": True},
        [({"betas": (0.9, -0.1)}, "Invalid beta parameter at index 1: -0.1"),
         ({"weight_decay": -0.1}, "Invalid weight_decay value: -0.1")],
        ({"lr": 0.05, "weight_decay": 0.0}, 1e-2), ({"lr": 2e-2, "weight_decay": 0.0}, 1e-2),
        "Loshchilov & Hutter 2019, [Decoupled Weight Decay Regularization](https://arxiv.org/abs/1711.05101)",
        "`torch.optim.AdamW`", oracle="torch:AdamW"),
    Row("SGD", [{}, {"momentum": 0.9}, {"momentum": 0.9, "dampening": 0.3}, {"momentum": 0.9, "nesterov": True},
                {"momentum": 0.5, "weight_decay": 0.1}, {"maximize": True, "momentum": 0.9, "weight_decay": 0.01}],
        {"lr": 0.05, "momentum": 0.7, "nesterov": True},
        [({"momentum": -0.5}, "Invalid momentum value: -0.5"),
         ({"nesterov": True}, "Nesterov momentum requires a momentum and zero dampening"),
         ({"nesterov": True, "momentum": 0.9, "dampening": 0.1},
          "Nesterov momentum requires a momentum and zero dampening"),
         ({"dampening": NAN}, "Invalid dampening value: nan")],
        ({"lr": 0.1, "momentum": 0.5}, 1e-4), ({"lr": 1e-3, "momentum": 0.9}, 1e-5),
        "Robbins & Monro 1951; momentum as Sutskever et al. 2013", "`torch.optim.SGD`", oracle="torch:SGD"),
    Row("RMSprop", [{}, {"centered": True}, {"momentum": 0.9}, {"alpha": 0.3},
                    {"centered": True, "momentum": 0.5, "weight_decay": 0.1}, {"maximize": True, "weight_decay": 0.01}],
        {"lr": 1e-3, "centered": True, "momentum": 0.3},
        [({"alpha": -0.1}, "Invalid alpha value: -0.1"), ({"momentum": INF}, "Invalid momentum value: inf")],
        ({"lr": 0.01}, 2e-2), ({"lr": 3e-3, "momentum": 0.5}, 1e-3),
        "Hinton, lecture 6e of *Neural Networks for Machine Learning* (2012)", "`torch.optim.RMSprop`",
        oracle="torch:RMSprop"),
    Row("Adagrad", [{}, {"lr_decay": 0.1}, {"initial_accumulator_value": 0.5}, {"weight_decay": 0.1, "maximize": True}],
        {"lr": 0.1, "lr_decay": 0.05, "initial_accumulator_value": 0.1},
        [({"lr_decay": -1.0}, "Invalid lr_decay value: -1.0"),
         ({"initial_accumulator_value": -1.0}, "Invalid initial_accumulator_value value: -1.0")],
        ({"lr": 0.5}, 1e-4), ({"lr": 0.3}, 5e-2),
        "Duchi et al. 2011, *Adaptive Subgradient Methods*", "`torch.optim.Adagrad`", oracle="torch:Adagrad"),
    Row("LAMB", [{}, {"bias_correction": False}, {"weight_decay": 0.0}, {"maximize": True, "weight_decay": 0.1}],
        {"lr": 1e-2, "weight_decay": 0.0, "betas": (0.5, 0.9)},
        [({"eps": NAN}, "Invalid epsilon value: nan")],
        ({"lr": 0.02, "weight_decay": 0.0}, 5e-2), None,  # trust ratio |p|/|u| stalls near p = 0
        "You et al. 2020, [Large Batch Optimization for Deep Learning](https://arxiv.org/abs/1904.00962)",
        "apex's `FusedLAMB`", oracle="lamb", reduces=True, diverging=True),
    Row("NAdamW", [{}, {"weight_decay": 0.0}, {"maximize": True, "momentum_decay": 0.1}],
        {"lr": 1e-3, "betas": (0.8, 0.99), "weight_decay": 0.1},
        [({"momentum_decay": -1.0}, "Invalid momentum_decay value: -1.0")],
        ({"lr": 0.05, "weight_decay": 0.0}, 1e-2), ({"lr": 1e-2, "weight_decay": 0.0, "betas": (0.9, 0.99)}, 1e-2),
        "Dozat 2016, *Incorporating Nesterov Momentum into Adam*; decoupled decay as AdamW",
        "`torch.optim.NAdam(decoupled_weight_decay=True)`", oracle="torch:NAdam"),
    Row("RAdam", [{}, {"weight_decay": 0.1}, {"weight_decay": 0.1, "decoupled_weight_decay": True},
                  {"maximize": True, "betas": (0.9, 0.9)}],
        {"lr": 3e-3, "betas": (0.5, 0.99), "weight_decay": 0.05},
        [({"betas": (0.9, 1.5)}, "Invalid beta parameter at index 1: 1.5")],
        ({"lr": 0.05}, 1e-2), ({"lr": 1e-2, "betas": (0.9, 0.99)}, 1e-3),
        "Liu et al. 2020, [On the Variance of the Adaptive Learning Rate and Beyond](https://arxiv.org/abs/1908.03265)",
        "`torch.optim.RAdam`", oracle="torch:RAdam"),
    Row("QHAdamW", [{}, {"nus": (0.7, 1.0), "betas": (0.995, 0.999)}, {"nus": (0.5, 0.8)},
                    {"weight_decay": 0.1, "eps": 0.0, "nus": (0.7, 0.9)}],
        {"lr": 3e-3, "nus": (0.3, 0.6), "weight_decay": 0.01},
        [({"nus": (1.5, 1.0)}, "Invalid nu parameter at index 0: 1.5")],
        ({"lr": 0.05, "nus": (0.7, 1.0)}, 1e-2), ({"lr": 2e-2, "nus": (0.7, 1.0), "betas": (0.995, 0.999)}, 1e-3),
        "Ma & Yarats 2019, [Quasi-hyperbolic momentum and Adam](https://arxiv.org/abs/1810.06801)",
        "facebookresearch/qhoptim's `QHAdamW`", diverging=True, denormal_hyper={"eps": 1e-8}),
    Row("Lion", [{}, {"weight_decay": 0.1}, {"betas": (0.95, 0.98), "lr": 3e-4}],
        {"lr": 1e-3, "betas": (0.5, 0.9), "weight_decay": 0.2},
        [({"lr": -0.1}, "Invalid learning rate: -0.1")],
        ({"lr": 0.02}, 2e-2), ({"lr": 1e-2}, 2e-2),
        "Chen et al. 2023, [Symbolic Discovery of Optimization Algorithms](https://arxiv.org/abs/2302.06675)",
        "lion-pytorch", diverging=True),
    Row("Mars", [{}, {"weight_decay": 0.1, "gamma": 0.1}, {"lr": 1e-2, "betas_1d": (0.8, 0.9)}],
        {"lr": 1e-3, "gamma": 0.05, "weight_decay_1d": 0.0},
        [({"betas_1d": (0.9, 1.0)}, "Invalid beta parameter at index 1: 1.0")],
        ({"lr": 0.05}, 1e-2), ({"lr": 1e-2, "betas": (0.9, 0.99)}, 1e-3),
        "Yuan et al. 2024, [MARS: Unleashing the Power of Variance Reduction](https://arxiv.org/abs/2411.10438)",
        "AGI-Arena/MARS's MARS-AdamW (approximate variant)", reduces=True, diverging=True, matrix_form=True),
    Row("Adafactor", [{}, {"weight_decay": 0.1, "lr": 0.05}, {"maximize": True, "d": 1.5},
                      {"eps": (1e-20, 1e-2), "beta2_decay": -0.5}],
        {"lr": 1e-3, "d": 2.0, "weight_decay": 0.01},
        [({"beta2_decay": 0.5}, "beta2_decay should be <= 0 but is: 0.5"),
         ({"eps": (None, -1.0)}, "epsilon2 should be >= 0 but is: -1.0"),  # (torch 2.13's words)
         ({"d": 0.5}, "Clipping threshold d should be >= 1 but is: 0.5")],
        ({"lr": 0.05}, 2e-2), ({"lr": 0.02}, 0.15),  # relative steps: slow in the valley (f 0.066)
        "Shazeer & Stern 2018, [Adafactor](https://arxiv.org/abs/1804.04235)", "`torch.optim.Adafactor` (torch ≥ 2.5)",
        oracle="torch:Adafactor", reduces=True, denormal_hyper={"eps": (None, 1e-2)}),
    Row("SophiaH", [{}, {"weight_decay": 0.0}, {"maximize": True, "rho": 0.5}],
        {"lr": 1e-3, "rho": 0.1, "betas": (0.9, 0.95)},
        [({"rho": -1.0}, "Invalid rho value: -1.0")],
        ({"lr": 0.05, "weight_decay": 0.0}, 1e-2), ({"lr": 3e-2, "weight_decay": 0.0}, 1e-3),
        "Liu et al. 2023, [Sophia](https://arxiv.org/abs/2305.14342), with a Hutchinson estimate passed every k steps",
        "the paper's rule (`opt.update_hessian`)", oracle="sophia", diverging=True),
]

BY_NAME = {r.name: r for r in DB}
