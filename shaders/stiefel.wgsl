// Riemannian SGD on the Stiefel manifold (rlx_gpu/optim/stiefel.py; the spec: rlx_gpu/reference/stiefel.py), the
// parts that are not GEMMs (those are rlx_gpu/linalg.py's). A shape's matrices sit one after another in work
// buffers xs, gs, ms, ys (and zs: the first QR pass), their p x p products in `small`.
//   st_gather   per tensor piece: X = param; G = grad * grad_mul + wd * param; M = momentum (the raw grad on the
//               first step, as geoopt seeds it)
//   st_sym      S = (S + S^T) / 2 for each p x p matrix
//   st_momentum M = mu * M + (1 - dampening) * R;  d = R + mu * M (nesterov) | M | R (no momentum);  Y = X + (-lr) d
//   (the QR retraction's Cholesky-QR is rlx_gpu.linalg.cholesky_qr_encode's: shaders/cholqr.wgsl)
//   st_scatter  per tensor piece: param = ys; momentum = ms
// The Cayley retraction (canonical), by Woodbury: A = u X^T - X u^T = W Z^T with W = [u, X], Z = [X, -u]; for
// V = [X, b] (or X), (I - A/2)^-1 (I + A/2) V = R + W/2 (I - Z^T W / 2)^-1 Z^T R, R = V + W/2 (Z^T V):
//   st_pack     W, Z, V from X, u (ys) and b (ms)
//   st_augment  [I - K/2 | T] for K = Z^T W and T = Z^T R, one 2p x (2p + q) matrix each
//   st_solve    Gauss-Jordan with partial pivoting, one workgroup a matrix; st_extract copies the solution out
// mp (st_gather, st_scatter: one record per piece): [count, offset in the chunk, offset in the work buffers, record
//     word of the tensor, grad_mul word, has momentum, columns q of vv (canonical; 0: euclidean), p]. prm (the
//     rest): [rows n, cols p, matrices, q, small offset, momentum, canonical, -], then (st_momentum) each matrix's
//     record word.

@group(0) @binding(0) var<storage, read> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> buf: array<f32>;
@group(0) @binding(3) var<storage, read_write> param: array<f32>;
@group(0) @binding(4) var<storage, read_write> xs: array<f32>;
@group(0) @binding(5) var<storage, read_write> gs: array<f32>;
@group(0) @binding(6) var<storage, read_write> ms: array<f32>;
@group(0) @binding(7) var<storage, read> mp: array<u32>;
@group(0) @binding(8) var<storage, read_write> ys: array<f32>;
@group(0) @binding(9) var<storage, read_write> small: array<f32>;
@group(0) @binding(10) var<storage, read> prm: array<u32>;
@group(0) @binding(13) var<storage, read_write> ww: array<f32>;
@group(0) @binding(14) var<storage, read_write> zz: array<f32>;
@group(0) @binding(15) var<storage, read_write> vv: array<f32>;
@group(0) @binding(16) var<storage, read_write> kk: array<f32>;
@group(0) @binding(17) var<storage, read_write> tt: array<f32>;
@group(0) @binding(18) var<storage, read_write> aug: array<f32>;

// record layout (override constants from the optimizer's Record)
override W_FLAGS: u32 = 0u;
override W_WD: u32 = 0u;
override W_MU: u32 = 0u;
override W_OMD: u32 = 0u;
override W_NLR: u32 = 0u;
override B_NEST: u32 = 0u;
override B_SEED: u32 = 0u;

const WG: u32 = 256u;

// #include "matrix_common.wgsl"

fn hf(w: u32) -> f32 { return bitcast<f32>(hyper[w]); }

@compute @workgroup_size(256)
fn st_gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp[0]) { return; }
    let e = mp[1] + i;
    let j = mp[2] + i;
    let r = mp[3];
    let x = param[e];
    let g = grad[e] * hf(mp[4]);
    xs[j] = x;
    gs[j] = g + hf(r + W_WD) * x;
    if (mp[5] != 0u) {
        let seed = (hyper[r + W_FLAGS] & B_SEED) != 0u;
        ms[j] = select(buf[e], g, seed);
    }
}

@compute @workgroup_size(256)
fn st_scatter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp[0]) { return; }
    let e = mp[1] + i;
    let j = mp[2] + i;
    if (mp[6] != 0u) {  // (canonical: X' and b' side by side in the rows of vv, q = mp[6] columns, p = mp[7])
        let p = mp[7];
        let k = (j / p) * mp[6] + j % p;
        param[e] = vv[k];
        if (mp[5] != 0u) { buf[e] = vv[k + p]; }
        return;
    }
    param[e] = ys[j];
    if (mp[5] != 0u) { buf[e] = ms[j]; }
}

@compute @workgroup_size(256)
fn st_sym(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let p = prm[1];
    if (i >= prm[2] * p * p) { return; }
    let b = i / (p * p);
    let r = (i % (p * p)) / p;
    let c = i % p;
    if (r >= c) { return; }  // (one thread per pair above the diagonal writes both)
    let o = prm[4] + b * p * p;
    let v = 0.5 * (small[o + r * p + c] + small[o + c * p + r]);
    small[o + r * p + c] = v;
    small[o + c * p + r] = v;
}

@compute @workgroup_size(256)
fn st_momentum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let np = prm[0] * prm[1];
    if (i >= prm[2] * np) { return; }
    let r = prm[8u + i / np];
    let x = xs[i];
    let g = gs[i];
    var d = g;
    if (prm[5] != 0u) {  // (momentum)
        let mu = hf(r + W_MU);
        let m = mu * ms[i] + hf(r + W_OMD) * g;
        ms[i] = m;
        d = select(m, g + mu * m, (hyper[r + W_FLAGS] & B_NEST) != 0u);
    }
    let u = hf(r + W_NLR) * d;
    ys[i] = select(x + u, u, prm[6] != 0u);  // (canonical: the step u itself, for the Cayley retraction)
}


@compute @workgroup_size(256)
fn st_pack(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let p = prm[1];
    let q = prm[3];
    if (i >= prm[2] * prm[0] * p) { return; }
    let row = i / p;
    let c = i % p;
    let x = xs[i];
    let u = ys[i];
    ww[row * 2u * p + c] = u;
    ww[row * 2u * p + p + c] = x;
    zz[row * 2u * p + c] = x;
    zz[row * 2u * p + p + c] = -u;
    vv[row * q + c] = x;
    if (q > p) { vv[row * q + p + c] = ms[i]; }
}

@compute @workgroup_size(256)
fn st_augment(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let m = 2u * prm[1];
    let q = prm[3];
    let w = m + q;
    if (i >= prm[2] * m * w) { return; }
    let b = i / (m * w);
    let r = (i % (m * w)) / w;
    let c = i % w;
    if (c < m) {
        aug[i] = select(0.0, 1.0, r == c) - 0.5 * kk[b * m * m + r * m + c];
    } else {
        aug[i] = tt[b * m * q + r * q + c - m];
    }
}

var<workgroup> pv: array<f32, 256>;
var<workgroup> pi: array<u32, 256>;

@compute @workgroup_size(256)
fn st_solve(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let b = wid.x + wid.y * nwg.x;
    let live = b < prm[2];
    let m = 2u * prm[1];
    let w = m + prm[3];
    let o = select(0u, b, live) * m * w;
    for (var k = 0u; k < m; k++) {
        // the pivot: the largest |a[i][k]|, i >= k (ties: the lowest row)
        var best = -1.0;
        var at = k;
        if (live) {
            for (var i = k + lid; i < m; i += WG) {
                let v = abs(aug[o + i * w + k]);
                if (v > best) { best = v; at = i; }
            }
        }
        pv[lid] = best;
        pi[lid] = at;
        workgroupBarrier();
        for (var d = WG / 2u; d > 0u; d = d / 2u) {
            if (lid < d && (pv[lid + d] > pv[lid] || (pv[lid + d] == pv[lid] && pi[lid + d] < pi[lid]))) {
                pv[lid] = pv[lid + d];
                pi[lid] = pi[lid + d];
            }
            workgroupBarrier();
        }
        let r = pi[0];
        storageBarrier();
        if (live && r != k) {
            for (var j = lid; j < w; j += WG) {
                let t = aug[o + k * w + j];
                aug[o + k * w + j] = aug[o + r * w + j];
                aug[o + r * w + j] = t;
            }
        }
        storageBarrier();
        workgroupBarrier();
        let piv = aug[o + k * w + k];
        storageBarrier();
        if (live) {
            for (var j = k + lid; j < w; j += WG) { aug[o + k * w + j] = aug[o + k * w + j] / piv; }
        }
        storageBarrier();
        if (live) {  // eliminate column k from every other row, a row per thread
            for (var i = lid; i < m; i += WG) {
                if (i == k) { continue; }
                let f = aug[o + i * w + k];
                for (var j = k; j < w; j++) { aug[o + i * w + j] = aug[o + i * w + j] - f * aug[o + k * w + j]; }
            }
        }
        storageBarrier();
        workgroupBarrier();  // (pv and pi are rewritten by the next column's search)
    }
}

@compute @workgroup_size(256)
fn st_extract(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let m = 2u * prm[1];
    let q = prm[3];
    if (i >= prm[2] * m * q) { return; }
    let b = i / (m * q);
    let r = (i % (m * q)) / q;
    let c = i % q;
    tt[i] = aug[b * m * (m + q) + r * (m + q) + m + c];
}
