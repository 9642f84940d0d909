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
    let M = gp.M; let N = gp.N;
    let ta = gp.ta != 0u; let tb = gp.tb != 0u;
    let LA = gp.lda; let LB = gp.ldb;
    for (var r = 0u; r < TK * TM / 256u; r++) {
        let idx = li + r * 256u;
        let kk = select(idx / TM, idx % TK, !ta);
        let xx = select(idx % TM, idx / TK, !ta);
        let m = m0 + xx; let k = k0 + kk;
        var va = T(0.0);
        if (m < M && k < K) { va = A[abase + select(m * LA + k, k * LA + m, ta)]; }
        As[kk * 32u + xx / 4u][xx % 4u] = va;
        let kb = select(idx / TM, idx % TK, tb);
        let yb = select(idx % TM, idx / TK, tb);
        let n = n0 + yb; let k2 = k0 + kb;
        var vb = T(0.0);
        if (n < N && k2 < K) { vb = B[bbase + select(k2 * LB + n, n * LB + k2, tb)]; }
        Bs[kb * 32u + yb / 4u][yb % 4u] = vb;
    }
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
