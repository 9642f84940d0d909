// Cholesky-QR of batches of tall (n, p) matrices (rlx_gpu/linalg.py cholesky_qr_encode, between GEMMs for the Gram
// matrices): small holds each matrix's p x p Gram matrix G = Y^T Y (from prm[4] on).
//   chol  one workgroup per matrix: the lower Cholesky factor L of G, in place (the upper triangle untouched)
//   trsm  one thread per row: qa = ya L^-T (row by row forward substitution)
// prm: [rows n, cols p, matrices, -, small offset, ...].

@group(0) @binding(0) var<storage, read_write> small: array<f32>;
@group(0) @binding(1) var<storage, read> prm: array<u32>;
@group(0) @binding(2) var<storage, read> ya: array<f32>;
@group(0) @binding(3) var<storage, read_write> qa: array<f32>;

const WG: u32 = 256u;

// #include "matrix_common.wgsl"


@compute @workgroup_size(256)
fn chol(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let b = wid.x + wid.y * nwg.x;
    let p = prm[1];
    let live = b < prm[2];
    let o = prm[4] + select(0u, b, live) * p * p;
    for (var j = 0u; j < p; j++) {
        if (live && lid == 0u) { small[o + j * p + j] = sqrt(small[o + j * p + j]); }
        storageBarrier();
        if (live) {
            let d = small[o + j * p + j];
            for (var i = j + 1u + lid; i < p; i += WG) { small[o + i * p + j] = small[o + i * p + j] / d; }
        }
        storageBarrier();
        if (live) {  // trailing update of the lower triangle, a row per thread
            for (var i = j + 1u + lid; i < p; i += WG) {
                let lij = small[o + i * p + j];
                for (var k = j + 1u; k <= i; k++) {
                    small[o + i * p + k] = small[o + i * p + k] - lij * small[o + k * p + j];
                }
            }
        }
        storageBarrier();
    }
}

@compute @workgroup_size(256)
fn trsm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let n = prm[0];
    let p = prm[1];
    if (i >= prm[2] * n) { return; }
    let b = i / n;
    let y = i * p;
    let l = prm[4] + b * p * p;
    for (var j = 0u; j < p; j++) {
        var s = ya[y + j];
        for (var k = 0u; k < j; k++) { s = s - qa[y + k] * small[l + j * p + k]; }
        qa[y + j] = s / small[l + j * p + j];
    }
}
