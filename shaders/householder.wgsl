// Blocked Householder QR of batches of matrices (rlx_gpu/linalg/householder.py): the reflectors of a panel of at most
// 32 columns here, one workgroup a matrix; their application to the columns after it, and the forming of Q, are GEMMs
// (compact WY: H_j0 ... H_j1 = I - V T V^T, T upper triangular). LAPACK's dlarfg convention: for x = A[k:, k],
// beta = -sign(x_0) |x| (sign(0) = +1), tau = (beta - x_0) / beta, v = x / (x_0 - beta) with v_0 = 1; x's tail all
// zero: tau = 0 (H = I). A[k][k] = beta (R's diagonal), v's tail below it; V (unit diagonal, zeros above) also into
// Vs for the GEMMs, T into its slot. Parameters by name (hp: HhParams, sp: SignParams; rlx_gpu/linalg/householder.py).
//   hh_panel  the panel's reflectors, applied to the panel's own columns as they are made
//   hh_sign   Q[:, j] *= sign(R_jj) (R's diagonal made positive; sign(0) = +1)

@group(0) @binding(0) var<storage, read_write> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> V: array<f32>;
@group(0) @binding(2) var<storage, read_write> Tb: array<f32>;
@group(0) @binding(3) var<storage, read> hp: HhParams;
@group(0) @binding(4) var<storage, read> R: array<f32>;
@group(0) @binding(5) var<storage, read> sp: SignParams;

// #include "matrix_common.wgsl"

var<workgroup> tw: array<f32, 1024>;  // T, [row * 32 + column]
var<workgroup> part: array<f32, 1024>;
var<workgroup> dots: array<f32, 32>;
// hh_panel's threads (householder.PANEL: 256 or 1024, a multiple of 32 and a power of two): PT / 32 row groups
// share a column's dot products and update; PT = 256 is the first version's loops and sums, in the same order.
override PT: u32 = 256u;

// The sum of v over hh_panel's PT threads, in a tree (wg_sum's for PT = 256), for every thread (uniform control
// flow; it begins with a barrier)
fn pt_sum(lid: u32, v: f32) -> f32 {
    workgroupBarrier();
    part[lid] = v;
    for (var w = PT / 2u; w > 0u; w = w / 2u) {
        workgroupBarrier();
        if (lid < w) { part[lid] = part[lid] + part[lid + w]; }
    }
    workgroupBarrier();
    let t = part[0];
    workgroupBarrier();
    return t;
}

@compute @workgroup_size(PT)
fn hh_panel(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    let live = z < hp.batch;
    let zz = select(0u, z, live);
    let b = hp.b; let ld = hp.lda; let n = hp.rows; let j0 = hp.j0;
    let base = hp.a_off + zz * hp.a_bs;
    let vb = hp.v_off + zz * hp.v_bs;
    let G = PT / 32u;
    let cc = lid % 32u; let g = lid / 32u;  // (a column of the panel, one of G row groups)
    for (var i = lid; i < 1024u; i += PT) { tw[i] = 0.0; }
    for (var kk = 0u; kk < b; kk++) {
        let k = j0 + kk;
        var s = 0.0;
        for (var i = k + 1u + lid; i < n; i += PT) { let x = X[base + i * ld + k]; s = s + x * x; }
        let sigma = pt_sum(lid, s);
        let alpha = X[base + k * ld + k];
        var beta = alpha; var tau = 0.0; var scale = 0.0;
        if (sigma > 0.0) {
            let nrm = sqrt(alpha * alpha + sigma);
            beta = select(nrm, -nrm, alpha >= 0.0);
            tau = (beta - alpha) / beta;
            scale = 1.0 / (alpha - beta);
        }
        storageBarrier();
        if (live) {
            if (lid == 0u) { X[base + k * ld + k] = beta; }
            for (var i = k + 1u + lid; i < n; i += PT) { X[base + i * ld + k] = X[base + i * ld + k] * scale; }
        }
        storageBarrier();
        if (live) {
            for (var i = hp.v0 + lid; i < n; i += PT) {  // (from row v0 <= j0: zeros above the panel too)
                V[vb + i * hp.ldv + k] = select(select(X[base + i * ld + k], 1.0, i == k), 0.0, i < k);
            }
        }
        var acc = 0.0;  // column j0 + cc: v^T A[k:, j] (cc > kk: to update it; cc < kk: V_j^T v, for T)
        if (cc < b && cc != kk) {
            for (var i = k + g; i < n; i += G) {
                acc = acc + select(X[base + i * ld + k], 1.0, i == k) * X[base + i * ld + j0 + cc];
            }
        }
        part[lid] = acc;
        workgroupBarrier();
        if (lid < 32u) {
            var t = 0.0;
            for (var q = 0u; q < G; q++) { t = t + part[q * 32u + lid]; }
            dots[lid] = t;
        }
        workgroupBarrier();
        if (live && cc > kk && cc < b) {
            let f = tau * dots[cc];
            for (var i = k + g; i < n; i += G) {
                let v = select(X[base + i * ld + k], 1.0, i == k);
                X[base + i * ld + j0 + cc] = X[base + i * ld + j0 + cc] - f * v;
            }
        }
        if (lid < kk) {  // T[0:kk, kk] = -tau T[0:kk, 0:kk] (V^T v)
            var t = 0.0;
            for (var q = lid; q < kk; q++) { t = t + tw[lid * 32u + q] * dots[q]; }
            tw[lid * 32u + kk] = -tau * t;
        }
        if (lid == 0u) { tw[kk * 32u + kk] = tau; }
        storageBarrier();
        workgroupBarrier();
    }
    if (live) {
        for (var i = lid; i < b * b; i += PT) { Tb[hp.t_off + zz * hp.t_bs + (i / b) * 32u + i % b] = tw[(i / b) * 32u + i % b]; }
    }
}

@compute @workgroup_size(256)
fn hh_sign(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let per = sp.rows * sp.cols;
    if (i >= per * sp.batch) { return; }
    let z = i / per; let r = (i % per) / sp.cols; let c = i % sp.cols;
    if (R[sp.r_off + z * sp.r_bs + c * sp.ldr + c] < 0.0) {
        let o = sp.q_off + z * sp.q_bs + r * sp.ldq + c;
        X[o] = -X[o];
    }
}
