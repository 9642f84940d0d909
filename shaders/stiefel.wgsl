// Riemannian SGD on the Stiefel manifold (rlx_gpu/optim/stiefel.py; the spec: rlx_gpu/reference/stiefel.py), the
// parts that are not GEMMs (those are rlx_gpu/linalg.py's). A shape's matrices sit one after another in work
// buffers xs, gs, ms, ys (and zs: the first QR pass), their p x p products in `small`.
//   st_gather   per tensor piece: X = param; G = grad * grad_mul + wd * param; M = momentum (the raw grad on the
//               first step, as geoopt seeds it)
//   st_sym      S = (S + S^T) / 2 for each p x p matrix
//   st_momentum M = mu * M + (1 - dampening) * R;  d = R + mu * M (nesterov) | M | R (no momentum);  Y = X + (-lr) d
//   (the QR retraction's Cholesky-QR is rlx_gpu.linalg.cholesky_qr_encode's: blocked, shaders/factor.wgsl)
//   st_scatter  per tensor piece: param = ys; momentum = ms
// The Cayley retraction (canonical), by Woodbury: A = u X^T - X u^T = W Z^T with W = [u, X], Z = [X, -u]; for
// V = [X, b] (or X), (I - A/2)^-1 (I + A/2) V = R + W/2 (I - Z^T W / 2)^-1 Z^T R, R = V + W/2 (Z^T V):
//   st_pack     W, Z, V from X, u (ys) and b (ms)
//   st_augment  [I - K/2 | T] for K = Z^T W and T = Z^T R, one 2p x (2p + q) matrix each, solved in place by the
//               blocked LU with partial pivoting (rlx_gpu.linalg.factor.lu_solve); st_extract copies the solution out
// Parameters by name (rlx_gpu/optim/stiefel.py): mp (st_gather, st_scatter: one StiefelPiece per tensor piece: count,
//     chunk_off, work_off, rec (the tensor's record word), gm_word, momentum, q (columns of vv; 0: euclidean), p);
//     sp (StiefelRun, the rest: n, p, batch, q, momentum, canonical, and rec: each matrix's record word).

@group(0) @binding(0) var<storage, read> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> buf: array<f32>;
@group(0) @binding(3) var<storage, read_write> param: array<f32>;
@group(0) @binding(4) var<storage, read_write> xs: array<f32>;
@group(0) @binding(5) var<storage, read_write> gs: array<f32>;
@group(0) @binding(6) var<storage, read_write> ms: array<f32>;
@group(0) @binding(7) var<storage, read> mp: StiefelPiece;
@group(0) @binding(8) var<storage, read_write> ys: array<f32>;
@group(0) @binding(9) var<storage, read_write> small: array<f32>;
@group(0) @binding(10) var<storage, read> sp: StiefelRun;
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

// #include "matrix_common.wgsl"

fn hf(w: u32) -> f32 { return bitcast<f32>(hyper[w]); }

@compute @workgroup_size(256)
fn st_gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    let e = mp.chunk_off + i;
    let j = mp.work_off + i;
    let r = mp.rec;
    let x = param[e];
    let g = grad[e] * hf(mp.gm_word);
    xs[j] = x;
    gs[j] = g + hf(r + W_WD) * x;
    if (mp.momentum != 0u) {
        let seed = (hyper[r + W_FLAGS] & B_SEED) != 0u;
        ms[j] = select(buf[e], g, seed);
    }
}

@compute @workgroup_size(256)
fn st_scatter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    let e = mp.chunk_off + i;
    let j = mp.work_off + i;
    if (mp.q != 0u) {  // (canonical: X' and b' side by side in the rows of vv, q columns)
        let p = mp.p;
        let k = (j / p) * mp.q + j % p;
        param[e] = vv[k];
        if (mp.momentum != 0u) { buf[e] = vv[k + p]; }
        return;
    }
    param[e] = ys[j];
    if (mp.momentum != 0u) { buf[e] = ms[j]; }
}

@compute @workgroup_size(256)
fn st_sym(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let p = sp.p;
    if (i >= sp.batch * p * p) { return; }
    let b = i / (p * p);
    let r = (i % (p * p)) / p;
    let c = i % p;
    if (r >= c) { return; }  // (one thread per pair above the diagonal writes both)
    let o = b * p * p;
    let v = 0.5 * (small[o + r * p + c] + small[o + c * p + r]);
    small[o + r * p + c] = v;
    small[o + c * p + r] = v;
}

@compute @workgroup_size(256)
fn st_momentum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let np = sp.n * sp.p;
    if (i >= sp.batch * np) { return; }
    let r = sp.rec[i / np];
    let x = xs[i];
    let g = gs[i];
    var d = g;
    if (sp.momentum != 0u) {
        let mu = hf(r + W_MU);
        let m = mu * ms[i] + hf(r + W_OMD) * g;
        ms[i] = m;
        d = select(m, g + mu * m, (hyper[r + W_FLAGS] & B_NEST) != 0u);
    }
    let u = hf(r + W_NLR) * d;
    ys[i] = select(x + u, u, sp.canonical != 0u);  // (canonical: the step u itself, for the Cayley retraction)
}


@compute @workgroup_size(256)
fn st_pack(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let p = sp.p;
    let q = sp.q;
    if (i >= sp.batch * sp.n * p) { return; }
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
    let m = 2u * sp.p;
    let q = sp.q;
    let w = m + q;
    if (i >= sp.batch * m * w) { return; }
    let b = i / (m * w);
    let r = (i % (m * w)) / w;
    let c = i % w;
    if (c < m) {
        aug[i] = select(0.0, 1.0, r == c) - 0.5 * kk[b * m * m + r * m + c];
    } else {
        aug[i] = tt[b * m * q + r * q + c - m];
    }
}

@compute @workgroup_size(256)
fn st_extract(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let m = 2u * sp.p;
    let q = sp.q;
    if (i >= sp.batch * m * q) { return; }
    let b = i / (m * q);
    let r = (i % (m * q)) / q;
    let c = i % q;
    tt[i] = aug[b * m * (m + q) + r * (m + q) + m + c];
}
