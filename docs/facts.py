"""What the optimizer pages say beyond the docstrings: the paper, the implementation whose semantics we follow, and
the measured agreement with the test that holds each figure. tests/test_docs_site.py checks every row: the test
exists and ``literal`` (the tolerance as written) is in its source, or in ``where``. The parabola and Rosenbrock
rows come from tests/optimizer_db.py's rows, as the elementwise optimizers' paper, peer and oracle do."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from optimizer_db import DB  # noqa: E402


def row(what, tol, test, literal, where=None):
    """One measured agreement: what is compared, the bound, the test (``file::function``) and the bound as the test
    writes it (in the test function, or in the file ``where``)."""
    return {"what": what, "tol": tol, "test": test, "literal": literal, "where": where}


PARITY = row("GPU against the twin: every option set of `tests/cases.py`, 16 sizes from 0 to 278,011 elements, 12 "
             "steps with tensors missing grads; every parameter and state buffer",
             "|gpu − twin| ≤ 2e-5·|twin| + 1e-6·max(1, max|twin|) per tensor (bit for bit on llvmpipe except LAMB's, "
             "MARS's and Adafactor's sums)",
             "tests/test_parity.py::test_parity_many_tensors", "RTOL, ATOL = 2e-5, 1e-6", "tests/cases.py")


def torch_row(name):
    return row(f"the twin against `torch.optim.{name}` over 20 steps (a tensor without grad every 4th), params and "
               "every state buffer", "rtol 1e-5, atol 1e-6", "tests/test_reference.py::test_twin_matches_torch",
               "rtol=1e-5, atol=1e-6")


FORMULA = row("the twin against a float64 transcription of the rule over 15 steps", "rtol 1e-5, atol 1e-6",
              "tests/test_reference.py::test_twin_matches_float64_formula", "rtol=1e-5, atol=1e-6")

# What the elementwise optimizers' twins are checked against beyond the GPU (tests/optimizer_db.py's ``oracle``).
ORACLES = {
    "formula": FORMULA,
    "lamb": row("the twin against hand-worked values of the trust ratio for one step", "rtol 2e-6",
                "tests/test_reference.py::test_lamb_trust_ratio", "rtol=2e-6"),
    "sophia": row("the twin against a float64 transcription over 15 steps with three Hessian updates",
                  "rtol 1e-5, atol 1e-6", "tests/test_reference.py::test_sophia_twin_matches_float64_formula",
                  "rtol=1e-5, atol=1e-6"),
}


def oracle_row(oracle: str) -> dict:
    return torch_row(oracle[len("torch:"):]) if oracle.startswith("torch:") else ORACLES[oracle]


# The elementwise optimizers from their test rows (paper, peer, oracle), then the others'.
OPTIMIZERS = {r.name: (r.paper, r.peer, [PARITY, oracle_row(r.oracle)]) for r in DB}
OPTIMIZERS.update({
    "SparseAdam": ("Kingma & Ba 2014, lazily on the touched rows", "`torch.optim.SparseAdam`",
                   [row("the twin against `torch.optim.SparseAdam` over 20 steps with repeated rows", "rtol 2e-6",
                        "tests/test_sparse.py::test_against_torch_and_twin", "(2e-6, 1e-7)", "tests/test_sparse.py"),
                    row("GPU against the twin, same steps", "bit for bit on the CPU adapter; rtol 1e-5, atol 1e-6 "
                        "elsewhere", "tests/test_sparse.py::test_against_torch_and_twin", "return 1e-5, 1e-6",
                        "tests/test_sparse.py")]),
    "Muon": ("Jordan et al. 2024, [Muon](https://kellerjordan.github.io/posts/muon/)",
             "`torch.optim.Muon` (its Newton-Schulz in float32 here)",
             [row("the twin against `torch.optim.Muon` with a float32 copy of its Newton-Schulz, 10 steps, a tensor "
                  "missing a grad", "params 2e-6, momentum 1e-6 absolute",
                  "tests/test_muon.py::test_muon_against_torch_and_twin", "rtol=0, atol=2e-6"),
              row("GPU against the twin, same steps", "params 2e-6, momentum 1e-6 absolute",
                  "tests/test_muon.py::test_muon_against_torch_and_twin", "atol=1e-6")]),
    "StiefelSGD": ("Bonnabel 2013, *Stochastic gradient descent on Riemannian manifolds*",
                   "geoopt's `RiemannianSGD` on `EuclideanStiefel` / `CanonicalStiefel`",
                   [row("the twin against geoopt over 30 steps", "5e-6 (Euclidean), 1e-4 (canonical) absolute",
                        "tests/test_stiefel.py::test_twin_equals_geoopt",
                        '("twin", "euclidean"): (5e-6, 5e-5), ("twin", "canonical"): (1e-4, 1e-3)',
                        "tests/test_stiefel.py"),
                    row("the GPU class against geoopt over 30 steps, matmul_dtype float32 / float16 (lr 0.01)",
                        "params 1e-5 / 2e-3 (Euclidean), 2e-4 / 5e-3 (canonical) absolute",
                        "tests/test_stiefel.py::test_twin_equals_geoopt",
                        '("float32", "euclidean"): (1e-5, 1e-4), ("float32", "canonical"): (2e-4, 2e-3)',
                        "tests/test_stiefel.py"),
                    row("GPU against the twin every step", "params 3e-6 (Euclidean), 3e-5 (canonical); momentum 10x",
                        "tests/test_stiefel.py::test_gpu_equals_twin", 'tol = 3e-6 if manifold == "euclidean" else 3e-5')]),
    "SOAP": ("Vyas et al. 2024, [SOAP: Improving and Stabilizing Shampoo using Adam](https://arxiv.org/abs/2409.11321)",
             "`pytorch_optimizer.SOAP` 4.1.0",
             [row("the twin against pytorch_optimizer.SOAP over 12 steps with three refreshes", "params 1e-5 absolute",
                  "tests/test_soap.py::test_twin_equals_pytorch_optimizer", "atol=1e-5"),
              row("GPU against the twin every step, every state buffer (Q up to sign)", "params 1e-5 absolute",
                  "tests/test_soap.py::test_gpu_equals_twin", "atol=1e-5"),
              row("decompositions on the device against the host's float64 ones, 12 steps with refreshes",
                  "params and Q 1e-4 absolute", "tests/test_soap.py::test_device_decompositions_follow_the_host_path",
                  "atol=1e-4"),
              row("matmul_dtype float16 against the twin: the displacement's relative error after the first update "
                  "and after 12 steps", "0.15 and 5e-2", "tests/test_soap.py::test_float16_path_follows_the_twin",
                  "(0.15, 5e-2)", "tests/test_soap.py")]),
    "Kron": ("Li 2018, [Preconditioner on Matrix Lie Group for SGD](https://arxiv.org/abs/1809.10232) (PSGD)",
             "kron-torch; `pytorch_optimizer.Kron` 4.1.0's update",
             [row("the twin against pytorch_optimizer.Kron fed the twin's probes and draws, 12 steps",
                  "params and factors 1e-6 absolute (the GPU class in float32: 2e-6)",
                  "tests/test_kron.py::test_twin_equals_pytorch_optimizer", '1e-6 if who == "twin" else 2e-6'),
              row("matmul_dtype float16 against the oracle and the twin, 12 steps",
                  "the displacement 3e-3 relative, factors 5e-4 absolute",
                  "tests/test_kron.py::test_float16_path_follows_the_twin", "F16 = (3e-3, 5e-4, 2e-5)",
                  "tests/test_kron.py"),
              row("GPU against the twin every step, update probability 0.5", "1e-6 absolute",
                  "tests/test_kron.py::test_gpu_equals_twin", "atol=1e-6")]),
})
