"""Named kernel parameters and device tables (rlx_gpu/runtime/params.py): fixed arrays, tables of structs, shared
constants, and the shaders that read the engine's and the add-ons' device words by name."""
import re

import numpy as np
import pytest

from rlx_gpu.runtime.params import Params, declare, structs
from rlx_gpu.runtime.source import shader_dir


def test_fixed_arrays_and_tail_offsets():
    G = Params("G", "a", "b:f32", "log:u32[3]", tail="rest")
    assert G.wgsl() == "struct G { a: u32, b: f32, log: array<u32, 3>, rest: array<u32>, }"
    assert (G.nbytes, G.offset("log"), G.offset("rest")) == (20, 8, 20)
    w = G.pack(a=1, b=0.5, log=[4, 5, 6], rest=[9, 10])
    assert list(w) == [1, int(np.float32(0.5).view(np.uint32)), 4, 5, 6, 9, 10]
    out = G.unpack(w)
    assert out["a"] == 1 and out["b"] == np.float32(0.5) and list(out["log"]) == [4, 5, 6]
    with pytest.raises(ValueError, match="log must be 3 values"):
        G.pack(a=1, b=0.5, log=[4, 5], rest=[])
    with pytest.raises(ValueError, match="does not fit a u32"):
        G.pack(a=1, b=0.5, log=[4, -5, 6], rest=[])
    for bad in ("x:f64", "x:u32[0]", "x[2"):
        with pytest.raises(ValueError, match="are not name"):
            Params("H", bad)


def test_pack_rows():
    R = Params("R", "x", "y:f32", "z")
    t = R.pack_rows(x=[1, 2, 3], y=0.5, z=np.array([7, 8, 9]))
    assert t.shape == (3, 3) and t.dtype == np.uint32
    assert [list(r) for r in t] == [[i, int(np.float32(0.5).view(np.uint32)), 6 + i] for i in (1, 2, 3)]
    assert R.unpack(t[1]) == {"x": 2, "y": np.float32(0.5), "z": 8}
    with pytest.raises(ValueError, match="z must be one value or 3"):
        R.pack_rows(x=[1, 2, 3], y=0.5, z=[1, 2])
    with pytest.raises(KeyError, match=r"missing \['z'\]"):
        R.pack_rows(x=1, y=0.5)
    with pytest.raises(ValueError, match="scalar fields only"):
        Params("S", "v:u32[2]").pack_rows(v=[1])


def test_declared_constants():
    declare("test_params_only.wgsl", Params("C", "a"), LOG=64)
    declare("test_params_only.wgsl", LOG=64)  # (the same value again: fine)
    assert structs("test_params_only.wgsl").splitlines() == ["struct C { a: u32, }", "const LOG: u32 = 64u;"]
    with pytest.raises(ValueError, match="constant LOG"):
        declare("test_params_only.wgsl", LOG=32)
    with pytest.raises(ValueError, match="constant N"):
        declare("test_params_only.wgsl", N=-1)


def test_gate_and_topk_tables_read_by_name():
    """The checked step's gate and candidate buffers and top-k's tables are structs declared on the host
    (engine/gating.py, addons/distributed/compression.py): the shaders index none of them by a number."""
    import rlx_gpu.addons.distributed.compression  # noqa: F401  (declares the top-k structs)
    from rlx_gpu.engine import gating
    src = {f: (shader_dir() / f).read_text() for f in ("gate.wgsl", "topk.wgsl", "topk_rebuild.wgsl")}
    bare = {f: re.findall(r"\b(?:gate|cand|sel|cnt|segs)\[[^\]]*\d[^\]]*\]", s) for f, s in src.items()}
    assert not any(bare.values()), bare
    assert "const HEAD" not in src["gate.wgsl"] and "struct LossScaleHead" not in src["gate.wgsl"]
    decl = structs("gate.wgsl")
    for name in ("struct Gate {", "struct Table {", "struct LossScaleHead {", f"const LOG: u32 = {gating.LOG}u;"):
        assert name in decl
    assert gating.READ_BYTES == gating.GATE.offset("args") and gating.GATE.offset("log") == 16
    for s in ("TensorSel", "BlockCount"):
        assert f"struct {s} " in structs("topk.wgsl")
    assert "struct Segment " in structs("topk_rebuild.wgsl")


def test_loss_scale_begins_with_the_protocol():
    from rlx_gpu.addons.amp import LOSS_SCALE
    from rlx_gpu.engine.gating import LOSS_SCALE_HEAD
    head = Params("LossScaleHead", *LOSS_SCALE_HEAD)
    assert LOSS_SCALE.fields[:len(head.fields)] == head.fields
    assert [LOSS_SCALE.offset(n) for n in head.names] == [head.offset(n) for n in head.names]


def test_reader_and_vec4_tables():
    """A table of structs read from whole vec4s: the reader's lanes follow the declaration (f32 by bitcast), and
    pack_vec4s pads each struct to whole vec4s."""
    R = Params("R6", "a", "b:f32", "c", "d", "e", "f")
    assert R.reader("tab") == ("fn tab_R6(i: u32) -> R6 { let v0 = tab[i]; let v1 = tab[i + 1u]; "
                               "return R6(v0.x, bitcast<f32>(v0.y), v0.z, v0.w, v1.x, v1.y); }")
    t = R.pack_vec4s(a=[1, 2], b=0.5, c=3, d=4, e=5, f=[6, 7])
    assert R.vec4s == 2 and t.shape == (4, 4) and list(t[3]) == [5, 7, 0, 0]
    declare("test_params_reader.wgsl", read_from={"tab": (R,)})
    assert structs("test_params_reader.wgsl").splitlines() == [R.wgsl(), R.reader("tab")]
    with pytest.raises(ValueError, match="scalar fields only"):
        Params("S", "v:u32[2]").reader("tab")


def test_adafactor_tables_read_by_name():
    """Adafactor's tables are structs declared in optim/adafactor.py, read whole (tables_AfX(i)); its aux sections
    come from named helpers: no lane of a table entry and no hand-computed section offset in the shader."""
    from rlx_gpu.optim import adafactor
    src = (shader_dir() / "adafactor.wgsl").read_text()
    assert not re.findall(r"\btables\[", src) and not re.findall(r"\b(?:hdr|seg|job|pr|j[01])\.[xyzw]\b", src)
    assert "2u * r.batch" not in src and "B * m + B * n" not in src
    decl = structs("adafactor.wgsl")
    for P in (adafactor.ROWS_HEAD, adafactor.FINISH_HEAD, adafactor.SEGMENT, adafactor.COL_JOB, adafactor.JOB,
              adafactor.PAIR):
        assert P.wgsl() in decl and P.reader("tables") in decl


# A block table (or the qat= export's runs) bound or passed as vec4<u32>, or a row of it read by lane.
_BLOCK_LANES = (r"\b(?:blocks|qat_runs)\s*:\s*array<vec4<u32>>", r"\bblk\.[xyzw]\b",
                r"\b(?:blocks|qat_runs)\[[^\]]*\]\.[xyzw]\b", r"\bblk\s*:\s*vec4<u32>",
                r"fn (?:block_of|active_block|q_block|qat_run)\([^)]*\)\s*->\s*vec4<u32>")


def _generated_modules():
    """Every module the runtime compiles (rlx-gpu check-shaders' list: each optimizer's signatures, quantized and
    qat= buckets, clip, gate, top-k) and the drivers as the engine emits them on a GPU (wide, full, subgroups)."""
    from rlx_gpu.core.lowp import BF16, F32
    from rlx_gpu.engine import Optimizer
    from rlx_gpu.engine.codegen import Emit, Signature, optimizer_module
    from rlx_gpu.tools.check import sources
    out = {s.label or s.path.name: s.code for s in sources.shipped()}
    emit = Emit(wide=True, full=True, subgroups=True, directive=True, vpack=True, qdirect=True)
    for name, cls in Optimizer.optimizer_classes().items():
        for bits in (0, 8) if cls.shader else ():
            for pd, sd in ((F32, F32), (BF16, BF16)):
                if bits and not cls.spec.quantizable:
                    continue
                out[f"{name} ({pd.name}, {bits}-bit, emitted)"] = optimizer_module(
                    cls, Signature(pd, pd, sd, False, False, bits), None, emit)
    return out


def test_block_tables_read_by_name():
    """Every kernel reads a block table row (runtime/layout.py's BLOCK_ROW, WGSL ``struct Block``) and a qat= run
    (engine/qatfuse.py's QAT_RUN) by name, in the shipped shaders and in every generated module: no table bound as
    ``array<vec4<u32>>``, no ``blk.x``/``.w``, no block passed or returned as a vec4."""
    mods = _generated_modules()
    files = {p.name: p.read_text() for p in shader_dir().glob("*.wgsl")}
    lanes = {name: hits for name, text in {**files, **mods}.items()
             if (hits := sorted({m for pat in _BLOCK_LANES for m in re.findall(pat, text)}))}
    assert not lanes, f"{len(lanes)} sources read block table rows by lane, e.g. {dict(list(lanes.items())[:4])}"
    from rlx_gpu.engine.qatfuse import QAT_RUN
    from rlx_gpu.runtime.layout import BLOCK_ROW
    assert BLOCK_ROW.wgsl() == "struct Block { tensor: u32, first: u32, end: u32, block: u32, }"
    assert BLOCK_ROW.nbytes == QAT_RUN.nbytes == 16 and QAT_RUN.names[:3] == BLOCK_ROW.names[:3]
    for name, text in mods.items():
        if re.search(r"\bblocks\s*:", text):
            assert "blocks: array<Block>;" in text and BLOCK_ROW.wgsl() in text, name
        if "qat_runs:" in text:
            assert "qat_runs: array<QatRun>;" in text and QAT_RUN.wgsl() in text, name


def test_block_table_columns_by_name():
    """A Layout's block table holds BLOCK_ROW's words in its order (the bytes the kernels bind), read back by name."""
    from rlx_gpu.runtime.layout import BLOCK_ROW, Layout
    lay = Layout([5000, 3], ids=[7, 9], alignment=256, max_binding=1 << 20, block=2048, block_base=10)
    tab = lay.blocks[0]
    assert tab.dtype == np.uint32 and tab.shape == (4, BLOCK_ROW.words)
    assert list(BLOCK_ROW.column(tab, "tensor")) == [7, 7, 7, 9]
    assert list(BLOCK_ROW.column(tab, "first")) == [0, 512, 1024, 5056 // 4]
    assert list(BLOCK_ROW.column(tab, "end")) == [5000, 5000, 5000, 5056 + 3]
    assert list(BLOCK_ROW.column(tab, "block")) == [10, 11, 12, 13]
    assert BLOCK_ROW.unpack(tab[3]) == {"tensor": 9, "first": 5056 // 4, "end": 5059, "block": 13}
    with pytest.raises(KeyError, match="no scalar field 'x'"):
        BLOCK_ROW.column(tab, "x")
