// What gemm.wgsl (f32) and gemm16.wgsl (f16) share; each declares `alias T` (its element type), TM, TK, the
// staging tiles As and Bs (array<vec4<T>, TK * 32>) and the bindings A, B, C (array<T>), gp (struct Gemm) and
// sp (struct Span, rlx_gpu/linalg/record.py).

// Stage the slab k0 .. k0 + TK of op(A) (rows m0 .. m0 + TM) in As[k][m / 4] and of op(B) (columns n0 ..) in
// Bs[k][n / 4], TK TM / 256 elements a thread, neighbouring threads on neighbouring addresses (along k where a row of
// the stored matrix runs along k: A as (M, K), B transposed as (N, K)); zeros past the edges (k from K: the
// operands' k range this workgroup sums, gp.K or a split-K chunk's). Each thread writes single
// components of the staging vectors: WGSL makes each component its own memory location (llvmpipe and NVIDIA's
// driver honour that for 16-bit ones too).
fn stage_tiles(li: u32, m0: u32, n0: u32, k0: u32, abase: u32, bbase: u32, K: u32) {
    let ta = gp.ta != 0u; let tb = gp.tb != 0u;
    for (var r = 0u; r < TK * TM / 256u; r++) {
        let pa = slab_place(li + r * 256u, !ta);
        let m = m0 + pa.y; let k = k0 + pa.x;
        var va = T(0.0);
        if (m < gp.M && k < K) { va = A[abase + stored_at(m, k, gp.lda, ta)]; }
        As[pa.x * 32u + pa.y / 4u][pa.y % 4u] = va;
        let pb = slab_place(li + r * 256u, tb);
        let n = n0 + pb.y; let k2 = k0 + pb.x;
        var vb = T(0.0);
        if (n < gp.N && k2 < K) { vb = B[bbase + stored_at(n, k2, gp.ldb, !tb)]; }
        Bs[pb.x * 32u + pb.y / 4u][pb.y % 4u] = vb;
    }
}

// Element idx of a staged slab: (its k within the slab, its row of op(A) or column of op(B) within the tile),
// neighbouring idx along k where the stored matrix runs along k (``along_k``: A as (M, K), B transposed as (N, K)).
fn slab_place(idx: u32, along_k: bool) -> vec2<u32> {
    return select(vec2<u32>(idx / TM, idx % TM), vec2<u32>(idx % TK, idx / TK), along_k);
}

// The offset of (x, k) in an operand stored with row stride `ld`: x's row (x ld + k), or, transposed, k's row.
fn stored_at(x: u32, k: u32, ld: u32, transposed: bool) -> u32 {
    return select(x * ld + k, k * ld + x, transposed);
}

// Outputs (m, n .. n + 3) of C at `base`: alpha v + beta C in float32 (C read only where beta != 0), rounded to T
// once; masked past M and N.
fn store_row(base: u32, m: u32, n: u32, v: vec4<f32>) {
    if (m >= gp.M) { return; }
    for (var j = 0u; j < 4u; j++) {
        if (n + j < gp.N) {
            let o = base + m * gp.ldc + n + j;
            var x = gp.alpha * v[j];
            if (gp.beta != 0.0) { x = x + gp.beta * f32(C[o]); }
            C[o] = T(x);
        }
    }
}

// A copy inside a compute pass (Newton-Schulz within an optimizer's step): C[c_off + i] = A[x_off + i], i < count.
@compute @workgroup_size(256)
fn copy_range(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < sp.count) { C[sp.c_off + i] = A[sp.x_off + i]; }
}
