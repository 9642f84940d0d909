"""NumPy twin of Kron (PSGD with Kronecker-factored preconditioners; Li 2018, kron-torch, ``pytorch_optimizer.Kron``
4.1.0) on 2-D tensors with two upper-triangular factors Q_0 (m x m) and Q_1 (n x n), in float32.

    once per step (k: steps taken before; the first group's settings): prob = precond_update_prob (a number, a
        callable of k, or None: min(1, max(0.03, exp(-0.001 (k - 500))))); update = u1 < prob;
        balance = u2 < balance_prob and update; (u1, u2) and the probes from the seeded source (below)
    per tensor: g += weight_decay p (weight_decouple False only)
        momentum_buffer = momentum_buffer * momentum + (1 - momentum) g;  d = momentum_buffer / (1 - momentum^step)
        balance: Q_i *= gm / |Q_i|_max, gm = sqrt(|Q_0|_max |Q_1|_max)
        update (h = d, or g without momentum_into_precondition_update; V the probe):
            A = Q_0 h Q_1^T;  B = Q_0^-T V Q_1^-1 (triangular solves)
            for side 0 (A A^T, B B^T) and side 1 (A^T A, B^T B), both from the old Q_i:
                T = triu(precond_lr (t1 - t2)) / (norm_lower_bound(t1 + t2) + tiny);  Q_i -= T Q_i
        P = Q_0^T Q_0 d Q_1^T Q_1;  P *= min(1.1 / (sqrt(mean(P^2)) + 1e-6), 1)
        P += weight_decay p (weight_decouple only);  p += -lr P

Randomness, all from one source, the first group's ``seed`` (a hyperparameter, saved in checkpoints): the probe V
of a tensor at step k+1 (k: the largest step count of the tensors, i.e. the optimizer's steps taken) is
``probe(name, shape, k + 1)``, by default :func:`device_probe` (standard normals by Box-Muller from a counter-based
hash of (seed, k+1, crc32(name), element), which the GPU class makes on the device); the two uniforms of step k+1
are ``default_rng([seed, k + 1]).random(2)``. So a skipped step draws nothing, a checkpoint resumes the same draws,
and the twin, the GPU class and an oracle fed the same values agree step for step. pytorch_optimizer decides
``update`` by a counter (every 1/prob steps) and draws balancing from ``np.random``; kron-torch draws both from its
own ``random.Random``: here both are draws, as kron-torch, which equals pytorch_optimizer's counter at probability 1.
"""
from __future__ import annotations

import math
import zlib

import numpy as np

from .base import F32
from .matrix import MatrixTwin, check_matmul_dtype, matrices_only

TINY = F32(np.finfo(np.float32).tiny)  # (pytorch_optimizer's eps: torch.finfo(torch.bfloat16).tiny, the same number)
SIDES = ("Q_0", "Q_1")


def default_prob(k: int) -> float:
    """pytorch_optimizer's default schedule (max 1, min 0.03, decay 0.001, flat for 500 steps), in float32."""
    p = F32(1.0) * np.exp(F32(-0.001) * (F32(k) - F32(500)), dtype=F32)
    return float(min(max(p, F32(0.03)), F32(1.0)))


def draws(seed: int, step: int) -> tuple:
    """The update and balance uniforms of optimizer step ``step`` (1-based)."""
    u = np.random.default_rng([seed, step]).random(2)
    return float(u[0]), float(u[1])


def mix32(x):
    """lowbias32 on uint32 (scalars or arrays), as shaders/kron.wgsl's mix32."""
    h = np.asarray(x, np.uint32)
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint32(16))
        h = h * np.uint32(0x7FEB352D)
        h = h ^ (h >> np.uint32(15))
        h = h * np.uint32(0x846CA68B)
        return h ^ (h >> np.uint32(16))


def probe_key(seed: int, step: int, name: str) -> int:
    return int(mix32(np.uint32(seed & 0xFFFFFFFF) ^ mix32(np.uint32(step & 0xFFFFFFFF) ^
                                                          mix32(np.uint32(zlib.crc32(name.encode()))))))


def device_probe(seed: int):
    """The default probe, the one the GPU class makes on the device (shaders/kron.wgsl kron_probe): Box-Muller on
    two counter-based uniforms per element, in float32 (the device's log and cos may differ from NumPy's in the
    last bits)."""
    def probe(name: str, shape: tuple, step: int) -> np.ndarray:
        key = np.uint32(probe_key(seed, step, name))
        e = np.arange(int(np.prod(shape)), dtype=np.uint32)
        u1 = ((mix32(key ^ mix32(e * np.uint32(2))) >> np.uint32(8)).astype(F32) + F32(1)) * F32(2 ** -24)
        u2 = (mix32(key ^ mix32(e * np.uint32(2) + np.uint32(1))) >> np.uint32(8)).astype(F32) * F32(2 ** -24)
        # (cos(2 pi u2) as -cos(2 pi u2 - pi): an argument in [-pi, pi), where WGSL bounds cos's error)
        return (-(np.sqrt(F32(-2) * np.log(u1)) * np.cos(F32(6.2831855) * u2 - F32(3.1415927)))).reshape(shape)
    return probe


def norm_lower_bound(s: np.ndarray) -> F32:
    """pytorch_optimizer's lower bound of the spectral norm of the symmetric ``s`` (the row form: for a symmetric
    matrix its two forms agree up to rounding)."""
    mx = F32(np.abs(s).max())
    a = s / (mx if mx > 0 else F32(1))
    j = int(np.argmax((a * a).sum(axis=1)))
    x = a @ a[j]
    x = x / max(F32(np.linalg.norm(x)), TINY)
    return mx * F32(np.linalg.norm(a.T @ x))


def solve_right_upper(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """X Q^-1 for upper-triangular Q (float64 solve, float32 result)."""
    return np.linalg.solve(q.astype(np.float64).T, x.astype(np.float64).T).T.astype(F32)


def precond_update(q0, q1, h, v, lr_p) -> None:
    a = (q0 @ h) @ q1.T
    b = solve_right_upper(solve_right_upper(v.T, q0).T, q1)  # Q_0^-T V Q_1^-1
    terms = ((a @ a.T, b @ b.T), (a.T @ a, b.T @ b))
    for q, (t1, t2) in zip((q0, q1), terms):
        t = np.triu((t1 - t2) * F32(lr_p)) / (norm_lower_bound(t1 + t2) + TINY)
        q -= t @ q


def precondition(q0, q1, d) -> np.ndarray:
    return q0.T @ (q0 @ d) @ q1.T @ q1


def balance(q0, q1) -> None:
    n0, n1 = F32(np.abs(q0).max()), F32(np.abs(q1).max())
    gm = np.sqrt(n0 * n1, dtype=F32)
    q0 *= gm / n0
    q1 *= gm / n1


class Kron(MatrixTwin):
    """Kron: PSGD with Kronecker-factored triangular preconditioners (pytorch_optimizer.Kron), 2-D tensors.
    Hyperparameters as ``rlx_gpu.Kron``'s (lr, momentum, weight_decay, weight_decouple, precond_update_prob,
    max_size_triangular, momentum_into_precondition_update, precond_lr, precond_init_scale, balance_prob, seed,
    matmul_dtype: float32 here whatever it says)."""
    defaults = dict(lr=1e-3, momentum=0.9, weight_decay=0.0, weight_decouple=True, precond_update_prob=None,
                    max_size_triangular=8192, momentum_into_precondition_update=True, precond_lr=0.1,
                    precond_init_scale=1.0, balance_prob=0.01, seed=0, matmul_dtype="float32")
    all_state_names = ("momentum_buffer", "Q_0", "Q_1")
    aux_states = SIDES
    extra_kwargs = ("probe",)

    @classmethod
    def check(cls, group):
        p = group["precond_update_prob"]
        if not (p is None or callable(p) or (isinstance(p, (int, float)) and not isinstance(p, bool)
                                             and 0.0 <= p <= 1.0)):
            raise ValueError(f"Kron: precond_update_prob must be None, a number in [0, 1] or a callable of the step, "
                             f"got {p!r}")
        if not 0.0 <= group["momentum"] < 1.0:
            raise ValueError(f"Kron: momentum must be in [0, 1), got {group['momentum']!r}")
        if not 0.0 <= group["balance_prob"] <= 1.0:
            raise ValueError(f"Kron: balance_prob must be in [0, 1], got {group['balance_prob']!r}")
        if not isinstance(group["seed"], (int, np.integer)) or isinstance(group["seed"], bool):
            raise ValueError(f"Kron: seed must be a non-negative int, got {group['seed']!r}")
        check_matmul_dtype("Kron", group)
        if not isinstance(group["max_size_triangular"], int) or group["max_size_triangular"] < 2:
            raise ValueError(f"Kron: max_size_triangular must be an int >= 2, got {group['max_size_triangular']!r}")

    @classmethod
    def check_shapes(cls, owner: str, shapes: dict, groups=()) -> None:
        matrices_only(owner, cls.__name__, shapes)
        limit = min((g["max_size_triangular"] for g in groups), default=cls.defaults["max_size_triangular"])
        for n, s in shapes.items():
            if min(s) < 2 or max(s) > limit:
                raise ValueError(f"{owner}: Kron keeps a triangular factor for each side; {n!r} has shape "
                                 f"{tuple(s)} (each side 2 to max_size_triangular={limit}; route it elsewhere)")

    @classmethod
    def state_shape(cls, state, shape):
        if state == "Q_0":
            return (shape[0], shape[0])
        if state == "Q_1":
            return (shape[1], shape[1])
        return tuple(shape)

    @classmethod
    def init_value(cls, state, group):
        return 0.0

    def __init__(self, params, *args, probe=None, **kwargs):
        check_probe(type(self).__name__, probe)
        super().__init__(params, *args, **kwargs)
        #: The probe source: a callable (name, shape, step) -> float32 array of that shape (None: device_probe of the
        #: first group's seed). Not saved in checkpoints (pass it again after loading).
        self.probe = probe

    def _new_state(self, s, shape, group):
        if s in SIDES:  # (scale^(1/2) I: the init scale spread over the two factors)
            side = shape[0] if s == "Q_0" else shape[1]
            return np.eye(side, dtype=F32) * F32(math.sqrt(group["precond_init_scale"]))
        return super()._new_state(s, shape, group)

    def _step_checked(self, grads, inv_scale, check):
        self._probes = None  # (drawn once a step: by a checked step's test, else just before the update)
        return super()._step_checked(grads, inv_scale, check)

    def _draw(self, grads) -> None:
        """This step's k, its (update, balance) draws and, on an update step, the probe of each tensor with a grad."""
        self.k = max((int(st["step"]) for st in self.state.values()), default=0)
        self._update_now, self._balance_now = decide(self.param_groups[0], self.k)
        src = self.probe or device_probe(self.param_groups[0]["seed"])
        self._probes = {n: probe_of(src, n, self._shapes[n], self.k + 1) for n in grads} if self._update_now else {}

    def _inputs_finite(self, grads) -> bool:
        """A caller's probe holding inf or NaN skips a checked step, as such a grad does (issue 21 item 5)."""
        self._draw(grads)
        return all(np.isfinite(v).all() for v in self._probes.values())

    def _before_update(self, grads):
        if self._probes is None:
            self._draw(grads)

    def _apply(self, n, g, st, group, fresh):
        self._name = n  # (the probe's name argument)
        super()._apply(n, g, st, group, fresh)

    def _update(self, p, g, st, group, fresh):
        if group["weight_decay"] and not group["weight_decouple"]:
            g = g + F32(group["weight_decay"]) * p
        mom = F32(group["momentum"])
        b = st["momentum_buffer"]
        b[...] = b * mom + F32(1 - group["momentum"]) * g
        d = b / F32(1 - group["momentum"] ** st["step"])
        q0, q1 = st["Q_0"], st["Q_1"]
        if self._balance_now:
            balance(q0, q1)
        if self._update_now:
            precond_update(q0, q1, d if group["momentum_into_precondition_update"] else g, self._probes[self._name],
                           group["precond_lr"])
        u = precondition(q0, q1, d)
        u = u * min(F32(1.1) / (np.sqrt(np.mean(u * u, dtype=F32)) + F32(1e-6)), F32(1.0))
        if group["weight_decay"] and group["weight_decouple"]:
            u = u + F32(group["weight_decay"]) * p
        p += F32(-group["lr"]) * u


def decide(group: dict, k: int) -> tuple:
    """(update, balance) for the step after ``k`` taken ones (the first group's settings and seed)."""
    prob = group["precond_update_prob"]
    if callable(prob):
        try:
            prob = float(prob(k))
        except (TypeError, ValueError) as e:
            raise ValueError(f"Kron: precond_update_prob({k}) did not give a number: {e}") from e
    prob = default_prob(k) if prob is None else float(prob)
    u1, u2 = draws(int(group["seed"]), k + 1)
    update = u1 < prob
    return update, (u2 < group["balance_prob"] and update)


def probe_of(probe, name: str, shape: tuple, step: int) -> np.ndarray:
    v = np.asarray(probe(name, tuple(shape), step))
    if v.shape != tuple(shape) or not np.issubdtype(v.dtype, np.floating):
        raise ValueError(f"Kron: the probe for {name!r} at step {step} is {v.dtype} of shape {v.shape}, expected "
                         f"floats of shape {tuple(shape)}")
    return v.astype(F32)


def check_probe(owner: str, probe) -> None:
    if probe is not None and not callable(probe):
        raise TypeError(f"{owner}: probe must be a callable (name, shape, step) -> array, got {probe!r}")
