"""The tensor-core GEMM's D and epilogue (``tcgen.py`` writes the rest; what each option means: ``tcconfig.py``):
D loaded as fragments before the K loop (``d_at="start"``), and each accumulator fragment into C, straight or
through workgroup scratch, with the mirrored block of a symmetric C written transposed."""
from __future__ import annotations

from .tcconfig import F, TcConfig
from .tcfrag import FragmentOps

__all__ = ["declarations", "d_prologue", "epilogue"]


def declarations(cfg: TcConfig) -> list:
    """Module-scope declarations of this part (the identity fragment's workgroup array)."""
    return [f"var<workgroup> Id: array<f16, {F * F}>;"] if cfg._identity() else []


def _frags(cfg: TcConfig, ops: FragmentOps):
    """(accumulator, row offset, column offset, number) of each fragment: unrolled on subgroup matrices, one loop
    variable ``q`` emulated."""
    if ops.sm:
        return [(f"c{q // cfg.tn}_{q % cfg.tn}", f"{F * (q // cfg.tn)}u", f"{F * (q % cfg.tn)}u", f"{q}u")
                for q in range(cfg.tm * cfg.tn)]
    return [("acc[q]", f"(q / {cfg.tn}u) * 16u", f"(q % {cfg.tn}u) * 16u", "q")]


def _loop(cfg: TcConfig, ops: FragmentOps, body: list) -> list:
    return body if ops.sm else [f"  for (var q = 0u; q < {cfg.tm * cfg.tn}u; q++) {{", *body, "  }"]


def d_prologue(cfg: TcConfig, ops: FragmentOps) -> list:
    """d_at="start": every accumulator begins as (beta / alpha) D (alpha applied at the store)."""
    if cfg.epi != "d" or cfg.d_at != "start":
        return []
    L = ["  let dr = p.beta / p.alpha;"]
    if cfg._identity():
        L += [f"  for (var i = lid; i < {F * F}u; i += {cfg.threads}u) {{ Id[i] = select(f16(0.0), f16(1.0), "
              f"i % {F + 1}u == 0u); }}", "  workgroupBarrier();",
              "  let idm = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&Id, 0u, 16u);"]
    body = []
    for c, i, j, _ in _frags(cfg, ops):
        off = f"dbase + (m0 + sm0 + {i}) * p.ldd + n0 + sn0 + {j}"
        body.append("  " + ops.d_init(c, "D", off, "p.ldd", cfg.d_type, "dr"))
    return L + _loop(cfg, ops, body)


def epilogue(cfg: TcConfig, ops: FragmentOps) -> list:
    """Each fragment to C: fragment stores, or ``slots`` fragments at a time through the subgroups' scratch."""
    frags = _frags(cfg, ops)
    if cfg.store == "direct":
        return _loop(cfg, ops, [line for f in frags for line in _direct(cfg, ops, *f[:3])])
    S = cfg.slots
    if not ops.sm:  # (q runs over the fragments S at a time; slot s holds fragment q + s)
        frags = [(f"acc[q + {s}u]", f"((q + {s}u) / {cfg.tn}u) * 16u", f"((q + {s}u) % {cfg.tn}u) * 16u", f"{s}u")
                 for s in range(S)]
        return [f"  for (var q = 0u; q < {cfg.tm * cfg.tn}u; q += {S}u) {{", *_chunk(cfg, ops, frags, True), "  }"]
    L = []
    for k in range(0, len(frags), S):
        part = [(c, i, j, f"{s}u") for s, (c, i, j, _) in enumerate(frags[k:k + S])]
        L += _chunk(cfg, ops, part, k + S < len(frags))
    return L


def _direct(cfg: TcConfig, ops: FragmentOps, c: str, i: str, j: str) -> list:
    at = f"cbase + (m0 + sm0 + {i}) * p.ldc + n0 + sn0 + {j}"
    L = [f"  {ops.scale(c, 'p.alpha')} {ops.store('C', at, c, 'p.ldc')}"]
    if cfg.sym:
        mirror = f"cbase + (n0 + sn0 + {j}) * p.ldc + m0 + sm0 + {i}"
        L.append(f"  if (bm != bn) {{ {ops.store('C', mirror, c, 'p.ldc', col_major=True)} }}")
    return L


def _chunk(cfg: TcConfig, ops: FragmentOps, frags: list, barrier_after: bool) -> list:
    """Fragments (accumulator, row and column offsets, slot) into their scratch slots, one barrier, then each lane
    writes its elements of each (and, ``sym``, of each mirrored block)."""
    slot = lambda s: f"(sg * {cfg.slots}u + {s}) * 256u"  # noqa: E731
    L = [f"  {ops.store('Sc', slot(s), c, '16u')}" for c, _, _, s in frags] + ["  workgroupBarrier();"]
    for _, i, j, s in frags:
        L.append("  " + _write(cfg, ops, i, j, slot(s), False))
        if cfg.sym:
            L.append(f"  if (bm != bn) {{ {_write(cfg, ops, i, j, slot(s), True)} }}")
    return L + (["  workgroupBarrier();"] if barrier_after else [])


def _write(cfg: TcConfig, ops: FragmentOps, i: str, j: str, slot: str, mirror: bool) -> str:
    """A lane's elements of one fragment from scratch into C (``mirror``: the transposed fragment, in the mirrored
    block): its ``e`` consecutive elements of one row of the output, scaled by alpha (+ beta D at the end), masked
    and rounded (``cvec``: eight float16 packed into one 16-byte store). The element (m, n) of the computed block
    goes to C[m, n], or mirrored to C[n, m]; the lane's output row is ``er`` of the fragment as written."""
    E = ops.e
    r0, c0 = (f"n0 + sn0 + {j}", f"m0 + sm0 + {i}") if mirror else (f"m0 + sm0 + {i}", f"n0 + sn0 + {j}")

    def src(e):  # the scratch index of the lane's element e (the fragment read transposed when mirrored)
        return f"{slot} + (ec + {e}) * 16u + er" if mirror else f"{slot} + er * 16u + ec + {e}"
    if cfg.cvec:
        vals = " ".join(f"let v{e} = p.alpha * Sc[{src(f'{e}u')}];" for e in range(E))
        words = ", ".join(f"pack2x16float(vec2<f32>(v{2 * w}, v{2 * w + 1}))" for w in range(E // 2))
        return f"{{ {vals} C[(cbase + ({r0} + er) * p.ldc + {c0} + ec) / 8u] = vec4<u32>({words}); }}"
    cast = "f16(v)" if cfg.out == "f16" else "v"
    inb = "m < p.M && n < p.N" if cfg.edges else "true"
    d = (" if (p.beta != 0.0) { v = v + p.beta * f32(D[dbase + m * p.ldd + n]); }"
         if cfg.epi == "d" and cfg.d_at == "end" else "")
    if mirror:
        where, dst = f"let n = {r0} + er; let m = {c0} + ec + e;", "C[cbase + n * p.ldc + m]"
    else:
        where, dst = f"let m = {r0} + er; let n = {c0} + ec + e;", "C[cbase + m * p.ldc + n]"
    return (f"for (var e = 0u; e < {E}u; e++) {{ {where} if ({inb}) {{ var v = p.alpha * Sc[{src('e')}];{d} "
            f"{dst} = {cast}; }} }}")
