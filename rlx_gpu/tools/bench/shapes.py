"""The bench's optimizers, precisions and parameter sets, and each row's minimum bytes moved per step."""
from __future__ import annotations

import numpy as np

from .declared import declared_rows

# name -> (class name, options, state element accesses per step (reads + writes), torch optimizer and options or
# None). A row moves at least 2*param + grad + 2*master + accesses*state bytes per element; min_bytes() names the
# exceptions. The matrix optimizers (accesses None) have no bytes model (their GEMMs are compute-bound): their rows
# give the time per step beside the library they follow (rows.py says on which tensors).
OPTIMIZERS = {
    "adamw": ("AdamW", {}, 4, ("AdamW", {"fused": True})),
    "adam": ("Adam", {}, 4, ("Adam", {"fused": True})),
    "sgd": ("SGD", {"momentum": 0.9}, 2, ("SGD", {"momentum": 0.9, "fused": True})),
    "rmsprop": ("RMSprop", {}, 2, ("RMSprop", {"foreach": True})),
    "adagrad": ("Adagrad", {}, 2, ("Adagrad", {"foreach": True})),
    # LAMB: AdamW's accesses, and its apply pass reads the param (its master copy) and m, v again (min_bytes)
    "lamb": ("LAMB", {}, 4, None),
    "nadamw": ("NAdamW", {}, 4, ("NAdam", {"foreach": True, "decoupled_weight_decay": True})),
    "radam": ("RAdam", {}, 4, ("RAdam", {"foreach": True})),
    "qhadamw": ("QHAdamW", {"nus": (0.7, 1.0)}, 4, None),
    "lion": ("Lion", {}, 2, None),
    "sophiah": ("SophiaH", {}, 3, None),   # m read+write, the Hessian EMA read
    "mars": ("Mars", {}, 6, None),         # m, v, g_prev read+write; matrices: g, g_prev read by the norm pass
    # factored moments are O(rows + cols); an unfactored tensor (< 2 dims) reads and writes its float32 second moment;
    # RMS(p) and RMS(u) precede the update: p is read twice, g two or three times (min_bytes)
    "adafactor": ("Adafactor", {}, 0, ("Adafactor", {"foreach": True})),
    # AdamW with the global-norm clip folded in: one more read of g. torch: clip_grad_norm_(foreach) + fused AdamW.
    "adamw+clip": ("AdamW", {"clip_grad_norm": 1.0}, 4, ("AdamW", {"fused": True, "clip": 1.0})),
    # AdamW stepped through GradScaler: the inf/NaN check reads g once more, the skip is decided on the device.
    # torch: GradScaler + fused AdamW (its found_inf goes into the fused kernel; no sync either).
    "adamw+scaler": ("AdamW", {"scaler": True}, 4, ("AdamW", {"fused": True, "scaler": True})),
    # block-quantized states (state_bits): m and v read and written as codes plus a float32 absmax per block;
    # torch's row is its fused float32 AdamW, bitsandbytes' AdamW8bit is timed beside it where it is installed
    "adamw8bit": ("AdamW", {"state_bits": 8}, 4, ("AdamW", {"fused": True})),
    "adamw4bit": ("AdamW", {"state_bits": 4}, 4, ("AdamW", {"fused": True})),
    # row-sparse grads touching every SPARSE_EVERY-th row: only those rows move (and their row numbers);
    # torch.optim.SparseAdam on CUDA is timed in benchmarks/sparse_bench.py
    "sparseadam": ("SparseAdam", {}, 4, None),
    "muon": ("Muon", {}, None, ("Muon", {})),
    "soap": ("SOAP", {}, None, ("pytorch_optimizer.SOAP", {})),
    "kron": ("Kron", {}, None, ("pytorch_optimizer.Kron", {})),
    # geoopt's RiemannianSGD needs ManifoldParameters: benchmarks/stiefel_bench.py times torch's transcription of it
    "stiefel": ("StiefelSGD", {"momentum": 0.9}, None, None),
    # Muon on the hidden matrices and AdamW on the rest (embeddings, vectors), one submission per step
    "partition": ("Partition", {}, None, None),
}
OPTIMIZERS.update(declared_rows(OPTIMIZERS))  # (a declaration without a row above: benched from its pass)
SPARSE_EVERY = 16
# further baselines timed on the same tensors where their library imports (name: module.Class, options)
EXTRA_BASELINES = {"adamw8bit": [("bitsandbytes.optim.AdamW8bit", {})]}
DEFAULT_SETS = "single:67108864,gpt2-124m,gpt2-1.5b"
# precision name -> (param dtype, grad dtype, state dtype, master weights)
PRECISIONS = {
    "fp32": ("float32", "float32", "float32", False),
    "bf16": ("bfloat16", "bfloat16", "bfloat16", False),
    "bf16-master": ("bfloat16", "bfloat16", "float32", True),
    "f16": ("float16", "float16", "float16", False),
    "f16-master": ("float16", "float16", "float32", True),
}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def gpt2_shapes(n_layer: int, d: int, vocab: int = 50257, ctx: int = 1024) -> list:
    shapes = [("wte", (vocab, d)), ("wpe", (ctx, d))]
    for i in range(n_layer):
        h = f"h{i}."
        shapes += [(h + "ln_1.weight", (d,)), (h + "ln_1.bias", (d,)),
                   (h + "attn.c_attn.weight", (d, 3 * d)), (h + "attn.c_attn.bias", (3 * d,)),
                   (h + "attn.c_proj.weight", (d, d)), (h + "attn.c_proj.bias", (d,)),
                   (h + "ln_2.weight", (d,)), (h + "ln_2.bias", (d,)),
                   (h + "mlp.c_fc.weight", (d, 4 * d)), (h + "mlp.c_fc.bias", (4 * d,)),
                   (h + "mlp.c_proj.weight", (4 * d, d)), (h + "mlp.c_proj.bias", (d,))]
    return shapes + [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]


def param_set(spec: str) -> list:
    """``single:N`` (one tensor of N elements), ``gpt2-124m`` (148 tensors) or ``gpt2-1.5b`` (580 tensors)."""
    if spec.startswith("single:"):
        raw = spec.split(":", 1)[1]
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"bench: single:N needs a whole number of elements >= 1, got {raw!r}")
        return [("w", (n,))]
    if spec == "gpt2-124m":
        return gpt2_shapes(12, 768)
    if spec == "gpt2-1.5b":
        return gpt2_shapes(48, 1600)
    raise ValueError(f"bench: unknown param set {spec!r}; use single:N, gpt2-124m or gpt2-1.5b")


def scale_shapes(shapes: list, f: float) -> list:
    """Every tensor shrunk to ``f`` of its size (flattened), keeping the tensor count."""
    return [(n, (max(1, int(np.prod(s) * f)),)) for n, s in shapes]


def min_bytes(opt: str, precision: str, shapes: list) -> int | None:
    """The bytes a step must move at least: params read and written (with master weights: the float32 master copy
    read and written and the 16-bit param only written), grads read, the optimizer's state accesses, and the
    gradient reads of a clip or an inf/NaN check (SparseAdam: of the touched rows only). A whole-tensor reduction
    before the update costs its second read: LAMB's trust ratio needs |p| and |u| of the whole tensor before any
    element is updated, so its update re-reads the param and both moments (fp32: 28 + 12 = 40 B a parameter over
    its two passes), and its default clip (apex's ``max_grad_norm=1.0``) reads g once more before them (44 B);
    MARS's norm of the corrected grad of a matrix reads g and g_prev once more (36 + 8 = 44 B).
    Adafactor: RMS(p) (before the update) and RMS(u) (u needs the new row and column factors, which need every
    g) come before any element is updated, so a matrix's p (its master copy) is read twice and g three times
    (fp32: 24 B a parameter), a vector's p twice, g twice and its second moment read, written and read again.
    None for the matrix optimizers, which have no bytes model."""
    pd, gd, sd, master = PRECISIONS[precision]
    ps, gs, ss = ITEMSIZE[pd], ITEMSIZE[gd], ITEMSIZE[sd]
    bits = OPTIMIZERS[opt][1].get("state_bits")
    if bits:  # a code per element and a float32 absmax per block (256 elements at 8 bits, 128 at 4)
        ss = bits / 8 + 4 / {8: 256, 4: 128}[bits]
    keeps_master = master and ps == 2
    if OPTIMIZERS[opt][2] is None:
        return None
    per = (8 + ps if keeps_master else 2 * ps) + gs + OPTIMIZERS[opt][2] * ss
    if opt in ("adamw+clip", "adamw+scaler"):
        per += gs
    if opt == "lamb":  # (and its default clip_grad_norm=1.0: the global grad norm read before the moments)
        per += (4 if keeps_master else ps) + 2 * ss + gs
    if opt == "adafactor":
        per += 4 if keeps_master else ps
    total = 0
    for _, s in shapes:
        n = int(np.prod(s))
        if opt == "sparseadam":  # the touched rows' elements, and one int32 row number per touched row
            rows = -(-s[0] // SPARSE_EVERY)
            total += rows * (n // s[0]) * per + 4 * rows
            continue
        if opt == "adafactor":
            total += n * (per + (2 * gs if len(s) >= 2 else gs + 12))
            continue
        total += n * (per + (gs + ss if opt == "mars" and len(s) == 2 else 0))
    return int(total)
