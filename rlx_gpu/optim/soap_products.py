"""SOAP's products for one run of matrices (rlx_gpu/optim/soap.py): in float32 (``SoapFloat``: eight GEMMs), or with
``matmul_dtype="float16"`` (``SoapHalf``): the grad, exp_avg and the preconditioned direction converted to float16
with a power-of-two scale per matrix (:mod:`rlx_gpu.linalg.half`), the bases as they are (orthonormal: entries at
most 1), the products on the device's float16 GEMM with float32 sums (intermediates rounded to float16 once), and
the scales undone on the float32 results. The refreshes' power iteration M = GG Q and the decompositions stay float32
(their inputs span too many orders of magnitude for float16)."""
from __future__ import annotations

from ..linalg.factor import Mat, Rec, _mm
from ..linalg.half import mm16, to_half, unscale

__all__ = ["SoapFloat", "SoapHalf"]


class SoapFloat:
    """float32: ``x`` holds the run's matrices (gs, ms, ts, ps, Q_0, Q_1) as Mats."""

    def __init__(self, r: Rec, x: dict):
        self.r, self.x = r, x

    def gram(self, side: int, out: Mat, m: int, n: int) -> None:
        g = self.x["gs"]
        if side == 0:
            _mm(self.r, g, g, out, m, m, n, tb=True, alpha=1.0, beta=0.0)
        else:
            _mm(self.r, g, g, out, n, n, m, ta=True, alpha=1.0, beta=0.0)

    def project_in(self, m: int, n: int) -> None:
        x = self.x
        for src, dst in (("gs", "ps"), ("ms", "ms")):  # Q_0^T src Q_1 (exp_avg in place in ms)
            _mm(self.r, x["Q_0"], x[src], x["ts"], m, n, m, ta=True, alpha=1.0, beta=0.0)
            _mm(self.r, x["ts"], x["Q_1"], x[dst], m, n, n, alpha=1.0, beta=0.0)

    def project_out(self, m: int, n: int) -> None:
        x = self.x
        _mm(self.r, x["Q_0"], x["ms"], x["ts"], m, n, m, alpha=1.0, beta=0.0)
        _mm(self.r, x["ts"], x["Q_1"], x["ps"], m, n, n, tb=True, alpha=1.0, beta=0.0)


class SoapHalf(SoapFloat):
    """float16 inputs: float16 copies of g (scale slot 0), exp_avg's (1), the direction's (2) and the bases in the
    shape's float16 buffers; ``path``: the optimizer's float16 GEMM."""

    def __init__(self, opt, r: Rec, shape, s0: int, x: dict):
        super().__init__(r, x)
        m, n = shape
        big = max(m, n) ** 2
        self.h = opt._halves(shape, dict(g=m * n, x=m * n, t=m * n, q0=m * m, q1=n * n, scratch=max(big, m * n)), 3)
        self.path, self.s0, self.shape = opt._mm_path, s0, shape
        half = {k: Mat(self.h[k], s0 * a * b, a * b, b) for k, (a, b) in
                dict(g=(m, n), x=(m, n), t=(m, n), q0=(m, m), q1=(n, n)).items()}
        self.x16 = half
        to_half(r, x["gs"], half["g"], m, n, self.h["scales"], 0, s0)

    def _mm(self, a, b, c, M, N, K, **kw) -> None:
        mm16(self.r, self.path, a, b, c, M, N, K, scratch=self.h["scratch"], **kw)

    def _unscale(self, c: Mat, rows: int, cols: int, slots) -> None:
        unscale(self.r, c, rows, cols, self.h["scales"], [(k, self.s0) for k in slots])

    def gram(self, side: int, out: Mat, m: int, n: int) -> None:
        g = self.x16["g"]
        s = (m, n)[side]
        if side == 0:
            self._mm(g, g, out, m, m, n, tb=True)
        else:
            self._mm(g, g, out, n, n, m, ta=True)
        self._unscale(out, s, s, (0, 0))

    def project_in(self, m: int, n: int) -> None:
        x, h = self.x, self.x16
        to_half(self.r, x["Q_0"], h["q0"], m, m)
        to_half(self.r, x["Q_1"], h["q1"], n, n)
        to_half(self.r, x["ms"], h["x"], m, n, self.h["scales"], 1, self.s0)
        for src, dst, k in (("g", "ps", 0), ("x", "ms", 1)):
            self._mm(h["q0"], h[src], h["t"], m, n, m, ta=True, out="f16")
            self._mm(h["t"], h["q1"], x[dst], m, n, n)
            self._unscale(x[dst], m, n, (k,))

    def project_out(self, m: int, n: int) -> None:
        x, h = self.x, self.x16
        to_half(self.r, x["ms"], h["x"], m, n, self.h["scales"], 2, self.s0)
        self._mm(h["q0"], h["x"], h["t"], m, n, m, out="f16")
        self._mm(h["t"], h["q1"], x["ps"], m, n, n, tb=True)
        self._unscale(x["ps"], m, n, (2,))
