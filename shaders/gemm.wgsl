// Batched GEMM (rlx_gpu/linalg.py): C = alpha * op(A) @ op(B) + beta * C for `batch` matrices in one dispatch
// (workgroup z = matrix), op = transpose where asked (by indexing: row-major storage throughout). Tiles of 128 x 128
// outputs per workgroup, 8 x 8 per thread, K in steps of 8 through workgroup memory; any M, N, K (edges masked).
// prm: [M, N, K, ta, tb, offset A, offset B, offset C, batch stride A, B, C, alpha bits, beta bits, column tiles,
//       row tiles, batch] (elements); workgroups are numbered (matrix, row tile, column tile), flattened (a 2-D grid
//       past the per-dimension limit).

@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<storage, read> prm: array<u32>;

// #include "matrix_common.wgsl"

const TM: u32 = 128u;  // outputs per workgroup along m and n
const TK: u32 = 8u;    // k per tile
var<workgroup> As: array<vec4<f32>, 256>;  // [k][m / 4]
var<workgroup> Bs: array<vec4<f32>, 256>;  // [k][n / 4]

@compute @workgroup_size(16, 16)
fn gemm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = wid.x + wid.y * nwg.x;
    let per = prm[13] * prm[14];
    if (g >= per * prm[15]) { return; }  // (uniform: the same for the whole workgroup)
    let li = lid.y * 16u + lid.x;
    let bt = g / per;
    let m0 = ((g % per) / prm[13]) * TM;
    let n0 = ((g % per) % prm[13]) * TM;
    let M = prm[0]; let N = prm[1]; let K = prm[2];
    let ta = prm[3] != 0u; let tb = prm[4] != 0u;
    let abase = prm[5] + bt * prm[8];
    let bbase = prm[6] + bt * prm[9];
    var c0a = vec4<f32>(0.0); var c0b = vec4<f32>(0.0);
    var c1a = vec4<f32>(0.0); var c1b = vec4<f32>(0.0);
    var c2a = vec4<f32>(0.0); var c2b = vec4<f32>(0.0);
    var c3a = vec4<f32>(0.0); var c3b = vec4<f32>(0.0);
    var c4a = vec4<f32>(0.0); var c4b = vec4<f32>(0.0);
    var c5a = vec4<f32>(0.0); var c5b = vec4<f32>(0.0);
    var c6a = vec4<f32>(0.0); var c6b = vec4<f32>(0.0);
    var c7a = vec4<f32>(0.0); var c7b = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        // 8 x 128 of op(A) and of op(B), 4 elements a thread each, neighbouring threads on neighbouring addresses
        // (along k where a row of the stored matrix runs along k: A as (M, K), B transposed as (N, K))
        for (var r = 0u; r < 4u; r++) {
            let idx = li + r * 256u;
            let kk = select(idx / TM, idx % TK, !ta);
            let xx = select(idx % TM, idx / TK, !ta);
            let m = m0 + xx; let k = k0 + kk;
            var va = 0.0;
            if (m < M && k < K) { va = A[abase + select(m * K + k, k * M + m, ta)]; }
            As[kk * 32u + xx / 4u][xx % 4u] = va;
            let kb = select(idx / TM, idx % TK, tb);
            let yb = select(idx % TM, idx / TK, tb);
            let n = n0 + yb; let k2 = k0 + kb;
            var vb = 0.0;
            if (n < N && k2 < K) { vb = B[bbase + select(k2 * N + n, n * K + k2, tb)]; }
            Bs[kb * 32u + yb / 4u][yb % 4u] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let a0 = As[kk * 32u + lid.y * 2u];
            let a1 = As[kk * 32u + lid.y * 2u + 1u];
            let b0 = Bs[kk * 32u + lid.x];
            let b1 = Bs[kk * 32u + 16u + lid.x];
            c0a = c0a + a0.x * b0; c0b = c0b + a0.x * b1;
            c1a = c1a + a0.y * b0; c1b = c1b + a0.y * b1;
            c2a = c2a + a0.z * b0; c2b = c2b + a0.z * b1;
            c3a = c3a + a0.w * b0; c3b = c3b + a0.w * b1;
            c4a = c4a + a1.x * b0; c4b = c4b + a1.x * b1;
            c5a = c5a + a1.y * b0; c5b = c5b + a1.y * b1;
            c6a = c6a + a1.z * b0; c6b = c6b + a1.z * b1;
            c7a = c7a + a1.w * b0; c7b = c7b + a1.w * b1;
        }
        workgroupBarrier();
    }
    // rows lid.y*8 .. +8; columns lid.x*4 .. +4 and 64 + lid.x*4 .. +4 (the two halves of the tile: each warp's
    // workgroup-memory reads of B stay contiguous); the accumulators stay in registers (no dynamic index)
    let mr = m0 + lid.y * 8u;
    let nc = n0 + lid.x * 4u;
    let base = prm[7] + bt * prm[10];
    store_row(base, mr + 0u, nc, c0a); store_row(base, mr + 0u, nc + 64u, c0b);
    store_row(base, mr + 1u, nc, c1a); store_row(base, mr + 1u, nc + 64u, c1b);
    store_row(base, mr + 2u, nc, c2a); store_row(base, mr + 2u, nc + 64u, c2b);
    store_row(base, mr + 3u, nc, c3a); store_row(base, mr + 3u, nc + 64u, c3b);
    store_row(base, mr + 4u, nc, c4a); store_row(base, mr + 4u, nc + 64u, c4b);
    store_row(base, mr + 5u, nc, c5a); store_row(base, mr + 5u, nc + 64u, c5b);
    store_row(base, mr + 6u, nc, c6a); store_row(base, mr + 6u, nc + 64u, c6b);
    store_row(base, mr + 7u, nc, c7a); store_row(base, mr + 7u, nc + 64u, c7b);
}

fn store_row(base: u32, m: u32, n: u32, v: vec4<f32>) {
    let M = prm[0]; let N = prm[1];
    let alpha = bitcast<f32>(prm[11]);
    let beta = bitcast<f32>(prm[12]);
    if (m >= M) { return; }
    for (var j = 0u; j < 4u; j++) {
        if (n + j < N) {
            let o = base + m * N + n + j;
            var x = alpha * v[j];
            if (beta != 0.0) { x = x + beta * C[o]; }
            C[o] = x;
        }
    }
}

// Frobenius scaling for Newton-Schulz: matrix z (workgroup z, flattened) of `count` elements at `offset` + z * `stride` is
// divided by max(norm, eps). prm: [count, offset, stride, eps bits, batch] (C is the matrices' buffer).
@compute @workgroup_size(256)
fn frob_scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= prm[4]) { return; }  // (past the batch in a padded 2-D grid; uniform for the workgroup)
    let n = prm[0];
    let base = prm[1] + z * prm[2];
    var s = 0.0;
    for (var i = lid; i < n; i = i + 256u) { let v = C[base + i]; s = s + v * v; }
    let d = max(sqrt(wg_sum(lid, s)), bitcast<f32>(prm[3]));
    for (var i = lid; i < n; i = i + 256u) { C[base + i] = C[base + i] / d; }
}

// A copy inside a compute pass (Newton-Schulz within an optimizer's step): C[offset C + i] = A[offset A + i].
// prm: [count, offset A, offset C].
@compute @workgroup_size(256)
fn copy_range(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < prm[0]) { C[prm[2] + i] = A[prm[1] + i]; }
}
