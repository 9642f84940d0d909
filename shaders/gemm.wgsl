// Batched GEMM (rlx_gpu/linalg.py): C = alpha * op(A) @ op(B) + beta * C for `batch` matrices in one dispatch
// (workgroup z = matrix), op = transpose where asked (by indexing: row-major storage throughout). Tiles of 64 x 64
// outputs per workgroup, 4 x 4 per thread, K in steps of 16 through workgroup memory; any M, N, K (edges masked).
// prm: [M, N, K, ta, tb, offset A, offset B, offset C, batch stride A, B, C, alpha bits, beta bits, column tiles,
//       row tiles, batch] (elements); workgroups are numbered (matrix, row tile, column tile), flattened (a 2-D grid
//       past the per-dimension limit).

@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<storage, read> prm: array<u32>;

const TM: u32 = 64u;
const TK: u32 = 16u;
var<workgroup> As: array<f32, 1024>;  // [k][m]
var<workgroup> Bs: array<f32, 1024>;  // [k][n]

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
    var acc0 = vec4<f32>(0.0); var acc1 = vec4<f32>(0.0); var acc2 = vec4<f32>(0.0); var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        // tile loads with neighbouring threads on neighbouring addresses: along k where a row of the stored
        // matrix runs along k (A as (M, K), B transposed as (N, K)), else along m or n
        for (var r = 0u; r < 4u; r++) {
            let idx = li + r * 256u;
            let kk = select(idx / TM, idx % TK, !ta);
            let xx = select(idx % TM, idx / TK, !ta);
            let m = m0 + xx; let k = k0 + kk;
            var va = 0.0;
            if (m < M && k < K) { va = A[abase + select(m * K + k, k * M + m, ta)]; }
            As[kk * TM + xx] = va;
            let kb = select(idx / TM, idx % TK, tb);
            let yb = select(idx % TM, idx / TK, tb);
            let n = n0 + yb; let k2 = k0 + kb;
            var vb = 0.0;
            if (n < N && k2 < K) { vb = B[bbase + select(k2 * N + n, n * K + k2, tb)]; }
            Bs[kb * TM + yb] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let a = vec4<f32>(As[kk * TM + lid.y * 4u], As[kk * TM + lid.y * 4u + 1u], As[kk * TM + lid.y * 4u + 2u],
                              As[kk * TM + lid.y * 4u + 3u]);
            let b = vec4<f32>(Bs[kk * TM + lid.x * 4u], Bs[kk * TM + lid.x * 4u + 1u], Bs[kk * TM + lid.x * 4u + 2u],
                              Bs[kk * TM + lid.x * 4u + 3u]);
            acc0 = acc0 + a.x * b;
            acc1 = acc1 + a.y * b;
            acc2 = acc2 + a.z * b;
            acc3 = acc3 + a.w * b;
        }
        workgroupBarrier();
    }
    // (the accumulators stay in registers: no dynamic index into them)
    let mr = m0 + lid.y * 4u;
    let nc = n0 + lid.x * 4u;
    let base = prm[7] + bt * prm[10];
    store_row(base, mr, nc, acc0);
    store_row(base, mr + 1u, nc, acc1);
    store_row(base, mr + 2u, nc, acc2);
    store_row(base, mr + 3u, nc, acc3);
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
// divided by max(norm, eps). prm: [count, offset, stride, eps bits] (C is the matrices' buffer).
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn frob_scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let n = prm[0];
    let base = prm[1] + (wid.x + wid.y * nwg.x) * prm[2];
    var s = 0.0;
    for (var i = lid; i < n; i = i + 256u) { let v = C[base + i]; s = s + v * v; }
    red[lid] = s;
    for (var w = 128u; w > 0u; w = w / 2u) {
        workgroupBarrier();
        if (lid < w) { red[lid] = red[lid] + red[lid + w]; }
    }
    workgroupBarrier();
    let d = max(sqrt(red[0]), bitcast<f32>(prm[3]));
    for (var i = lid; i < n; i = i + 256u) { C[base + i] = C[base + i] / d; }
}

// A copy inside a compute pass (Newton-Schulz within an optimizer's step): C[offset C + i] = A[offset A + i].
// prm: [count, offset A, offset C].
@compute @workgroup_size(256)
fn copy_range(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i < prm[0]) { C[prm[2] + i] = A[prm[1] + i]; }
}
