"""SOAP's first float16 update, simulated in NumPy (tests/test_soap.py's derivation of its step-1 bound): random
m x n gradients, the bases of a first gradient's Gram matrices, the projections as gemm16 computes them (inputs
scaled to [1, 2) and rounded to float16, 16 products at a time summed in float16 FMAs or in float32, each group's sum
added in float32, the intermediate rounded to float16), Adam's first step and normalize_gradient. Prints, per
accumulation model, the Frobenius error of the whole update (heavy-tailed: a ratio of rounding errors where a
rotated entry is near zero) and the test's well-posed error against its bound.

    python benchmarks/soap_f16_first_step.py [cases]
"""
import sys

import numpy as np

sys.path.insert(0, "tests")
from test_soap import first_update_apart  # noqa: E402

H = np.float16


def to16(x):
    s = 2.0 ** -np.floor(np.log2(np.abs(x).max()))
    return (x * s).astype(H), 1 / s


def mm16(a, b, f16_sums: bool, out16=False):
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in range(0, a.shape[1], 16):
        c = np.zeros(acc.shape, H if f16_sums else np.float32)
        for k in range(k0, min(a.shape[1], k0 + 16)):
            prod = a[:, k:k + 1].astype(np.float64) * b[k:k + 1, :].astype(np.float64)
            c = (c.astype(np.float64) + prod).astype(c.dtype)
        acc = acc + c.astype(np.float32)
    return acc.astype(H) if out16 else acc


def proj16(x, q0, q1, f16_sums: bool, back=False):
    xs, inv = to16(x.astype(np.float32))
    a, b = q0.astype(H), q1.astype(H)
    t = mm16(a if back else a.T.copy(), xs, f16_sums, out16=True)
    return mm16(t, b.T.copy() if back else b, f16_sums).astype(np.float64) * inv


def case(seed, f16_sums, m=12, n=20, b1=0.95, b2=0.95, eps=1e-8):
    rng = np.random.default_rng(seed)
    g0, g = rng.standard_normal((2, m, n)) * 1e-3
    q0, q1 = np.linalg.eigh(g0 @ g0.T)[1][:, ::-1], np.linalg.eigh(g0.T @ g0)[1][:, ::-1]
    gp = q0.T @ g @ q1
    u = q0 @ ((q0.T @ ((1 - b1) * g) @ q1) / (np.sqrt((1 - b2) * gp * gp) + eps)) @ q1.T
    gp16 = proj16(g, q0, q1, f16_sums)
    r = proj16((1 - b1) * g, q0, q1, f16_sums) / (np.sqrt((1 - b2) * gp16 * gp16) + eps)
    u16 = proj16(r, q0, q1, f16_sums, back=True)
    u, u16 = u / np.sqrt(np.mean(u * u)), u16 / np.sqrt(np.mean(u16 * u16))
    return (np.linalg.norm(u16 - u) / np.linalg.norm(u), *first_update_apart(q0, q1, g, u16, u))


if __name__ == "__main__":
    cases = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    for f16_sums in (False, True):
        e = np.array([case(s, f16_sums) for s in range(cases)])
        print(f"{'float16' if f16_sums else 'float32'} sums: Frobenius median {np.median(e[:, 0]):.3f} 99% "
              f"{np.quantile(e[:, 0], 0.99):.3f} max {e[:, 0].max():.3f}; well-posed median {np.median(e[:, 1]):.4f} "
              f"max {e[:, 1].max():.4f}; bound {e[:, 2].min():.3f} to {e[:, 2].max():.3f}; "
              f"over the bound {(e[:, 1] > e[:, 2]).sum()}")
