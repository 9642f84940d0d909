// Kron's kernels (rlx_gpu/optim/kron.py); the products between them are rlx_gpu/linalg's batched GEMMs, and the
// triangular solves its blocked ones (rlx_gpu/linalg/factor.py). Per shape, the work buffers hold the shape's
// matrices back to back.
//   kron_momentum (per tensor piece): g = grad * grad_mul (+ weight_decay p without weight_decouple);
//       b = b * momentum + (1 - momentum) g;  d = b / (1 - momentum^step) -> ds;  g -> hs (when the update uses g)
//   kron_apply (per piece): u = ps * scale (+ weight_decay p with weight_decouple);  p = p + (-lr) u
// Parameters by name (rlx_gpu/optim/kron.py): mp, one KronPiece per tensor piece: count, chunk_off, work_off,
//     flags (1: L2 decay, 2: write g, 4: decoupled decay), gm_word (grad_mul's hyper word), slot (the matrix's),
//     mom, omm = 1 - momentum, bias = 1 - momentum^step, wd, neg_lr, key (the probe's), probe_off (the piece's
//     offset in its tensor); kp, a KronRun for the kernels over a run of matrices (each says which fields it reads).

@group(0) @binding(0) var<storage, read> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> buf: array<f32>;
@group(0) @binding(3) var<storage, read_write> param: array<f32>;
@group(0) @binding(4) var<storage, read_write> ds: array<f32>;
@group(0) @binding(5) var<storage, read_write> hs: array<f32>;
@group(0) @binding(6) var<storage, read> ps: array<f32>;
@group(0) @binding(7) var<storage, read> sc: array<f32>;
@group(0) @binding(8) var<storage, read> mp: KronPiece;

// #include "matrix_common.wgsl"

@compute @workgroup_size(256)
fn kron_momentum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    let e = mp.chunk_off + i;
    var g = grad[e] * bitcast<f32>(hyper[mp.gm_word]);
    if ((mp.flags & 1u) != 0u) { g = g + mp.wd * param[e]; }
    let b = buf[e] * mp.mom + mp.omm * g;
    buf[e] = b;
    ds[mp.work_off + i] = b / mp.bias;
    if ((mp.flags & 2u) != 0u) { hs[mp.work_off + i] = g; }
}

@compute @workgroup_size(256)
fn kron_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    let e = mp.chunk_off + i;
    var u = ps[mp.work_off + i] * sc[mp.slot];
    if ((mp.flags & 4u) != 0u) { u = u + mp.wd * param[e]; }
    param[e] = param[e] + mp.neg_lr * u;
}

// The default probe (rlx_gpu/reference/kron.py device_probe): element e of a tensor (e = the piece's offset in its
// tensor + i) gets z = -sqrt(-2 ln u1) cos(2 pi u2 - pi), u1 = (hash(key ^ hash(2e)) >> 8 + 1) 2^-24, u2 = (hash(key ^
// hash(2e + 1)) >> 8) 2^-24, into vs; mp.key: the tensor's (seed, step, name), mp.probe_off: the piece's offset.
@group(0) @binding(9) var<storage, read_write> vs: array<f32>;

fn mix32(x: u32) -> u32 {  // (lowbias32)
    var h = x;
    h = h ^ (h >> 16u); h = h * 0x7feb352du; h = h ^ (h >> 15u); h = h * 0x846ca68bu; h = h ^ (h >> 16u);
    return h;
}

@compute @workgroup_size(256)
fn kron_probe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    let e = mp.probe_off + i;
    let u1 = (f32(mix32(mp.key ^ mix32(2u * e)) >> 8u) + 1.0) * 5.9604645e-8;
    let u2 = f32(mix32(mp.key ^ mix32(2u * e + 1u)) >> 8u) * 5.9604645e-8;
    vs[mp.work_off + i] = -(sqrt(-2.0 * log(u1)) * cos(6.2831855 * u2 - 3.1415927));  // (cos's argument in [-pi, pi))
}

// Run-level kernels: the KronRun fields each reads.
@group(0) @binding(10) var<storage, read_write> sa: array<f32>;
@group(0) @binding(11) var<storage, read_write> sb: array<f32>;
@group(0) @binding(12) var<storage, read> sx: array<f32>;
@group(0) @binding(13) var<storage, read_write> q: array<f32>;
@group(0) @binding(14) var<storage, read_write> xv: array<f32>;
@group(0) @binding(15) var<storage, read_write> vals: array<f32>;
@group(0) @binding(16) var<storage, read> kp: KronRun;

// sa = sa - sb (t1 - t2), sb = sa + sb (t1 + t2); kp: count
@compute @workgroup_size(256)
fn kron_terms(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= kp.count) { return; }
    let t1 = sa[i]; let t2 = sb[i];
    sa[i] = t1 - t2;
    sb[i] = t1 + t2;
}

// sa = triu(sa * precond_lr) / (vals[slot0 + z] + tiny) for matrix z; kp: s, count, plr, slot0
@compute @workgroup_size(256)
fn kron_tri(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= kp.count) { return; }
    let s = kp.s;
    let e = i % (s * s);
    var v = sa[i] * kp.plr;
    if (e % s < e / s) { v = 0.0; }  // (below the diagonal)
    sa[i] = v / (vals[kp.slot0 + i / (s * s)] + 1.17549435e-38);
}

// q[off + i] -= sb[i] on and above each s x s matrix's diagonal (T Q is upper triangular: the products below it, which
// are zero, are not made: rlx_gpu/optim/kron.py); kp: count, off, s
@compute @workgroup_size(256)
fn kron_sub(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= kp.count) { return; }
    let e = i % (kp.s * kp.s);
    if (e % kp.s >= e / kp.s) { q[kp.off + i] = q[kp.off + i] - sb[i]; }
}

var<workgroup> arg: array<u32, 256>;

// pytorch_optimizer's norm_lower_bound of each symmetric s x s matrix z of sb (from 0), in passes: a = S / max|S|;
// j = argmax of a's column sums of squares (= row sums; the first of equals); x = a a_j; x /= max(|x|, tiny);
// bound = max|S| |a^T x|. S is symmetric, so columns are read for rows: threads over columns read coalesced.
// Column passes (a thread a column, ceil(s / 256) workgroups a matrix): kron_nl_col (what: 0 max |S_:j|, 1 sum of
// a_ij^2, 2 x_j = sum_k a_kj a_jk, 3 y_j = sum_k a_kj x_k / |x|) into xv; vector passes (a workgroup a matrix)
// reduce xv into nl = [max (B), argmax (B, as f32), |x| (B)] and finally vals[slot0 + z] = max |y|.
// kp: s, batch, slot0, what; xv: 2 s floats a matrix (x, then the other passes); the bound goes to q (bound).
fn nl_div(z: u32) -> f32 { let mx = vals[z]; return select(1.0, mx, mx > 0.0); }

@compute @workgroup_size(256)
fn kron_nl_col(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    let s = kp.s; let per = (s + 255u) / 256u;
    let z = g / per; let j = (g % per) * 256u + lid;
    if (z >= kp.batch || j >= s) { return; }
    let base = z * s * s; let what = kp.what;
    var acc = 0.0;
    if (what == 0u) {
        for (var i = 0u; i < s; i++) { acc = max(acc, abs(sb[base + i * s + j])); }
    } else if (what == 1u) {
        let d = nl_div(z);
        for (var i = 0u; i < s; i++) { let v = sb[base + i * s + j] / d; acc = acc + v * v; }
    } else if (what == 2u) {
        let d = nl_div(z); let r = u32(vals[kp.batch + z]);
        for (var k = 0u; k < s; k++) { acc = acc + (sb[base + k * s + j] / d) * (sb[base + r * s + k] / d); }
    } else {
        let d = nl_div(z); let xn = vals[2u * kp.batch + z];
        for (var k = 0u; k < s; k++) { acc = acc + (sb[base + k * s + j] / d) * (xv[z * s + k] / xn); }
    }
    if (what == 2u) { xv[z * s + j] = acc; } else { xv[kp.batch * s + z * s + j] = acc; }
}

// The vector passes: what 0: nl max; 1: nl argmax; 2: nl |x| (max'd with tiny); 3: bound into the run's slots.
// xv's second half (batch * s floats on) holds what the column passes 0, 1 and 3 wrote; x sits in the first half.
@compute @workgroup_size(256)
fn kron_nl_vec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= kp.batch) { return; }  // (uniform for the workgroup)
    let s = kp.s; let what = kp.what;
    let src = select(kp.batch * s + z * s, z * s, what == 2u);
    var best = -1.0; var bj = 0u; var acc = 0.0;
    for (var j = lid; j < s; j = j + 256u) {
        let v = xv[src + j];
        if (v > best) { best = v; bj = j; }
        acc = acc + v * v;
    }
    if (what == 2u || what == 3u) {
        let t = sqrt(wg_sum(lid, acc));
        if (lid == 0u) {
            if (what == 2u) { vals[2u * kp.batch + z] = max(t, 1.17549435e-38); }
            else { q[kp.slot0 + z] = vals[z] * t; }
        }
        return;
    }
    workgroupBarrier();
    red[lid] = best; arg[lid] = bj;
    for (var w = 128u; w > 0u; w = w / 2u) {
        workgroupBarrier();
        if (lid < w) {
            let o = red[lid + w]; let oj = arg[lid + w];
            if (o > red[lid] || (o == red[lid] && oj < arg[lid])) { red[lid] = o; arg[lid] = oj; }
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        if (what == 0u) { vals[z] = red[0]; } else { vals[kp.batch + z] = f32(arg[0]); }  // (exact below 2^24)
    }
}

// vals[slot0 + z] = min(1.1 / (sqrt(mean(P^2)) + 1e-6), 1) for matrix z of sx (count elements each, from offset);
// kp: count, off, batch, slot0
@compute @workgroup_size(256)
fn kron_rms(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= kp.batch) { return; }
    let n = kp.count;
    let base = kp.off + z * n;
    var acc = 0.0;
    for (var i = lid; i < n; i = i + 256u) { let v = sx[base + i]; acc = acc + v * v; }
    let t = wg_sum(lid, acc);
    if (lid == 0u) { vals[kp.slot0 + z] = min(1.1 / (sqrt(t / f32(n)) + 1e-6), 1.0); }
}

// Balance matrix z's two factors (Q_0 in q, Q_1 in sa): each *= sqrt(|Q_0|_max |Q_1|_max) / its own |.|_max.
// kp: m, n, batch, q0_off, q1_off
@compute @workgroup_size(256)
fn kron_balance(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= kp.batch) { return; }
    let m2 = kp.m * kp.m; let n2 = kp.n * kp.n;
    let b0 = kp.q0_off + z * m2; let b1 = kp.q1_off + z * n2;
    var a = 0.0;
    for (var i = lid; i < m2; i = i + 256u) { a = max(a, abs(q[b0 + i])); }
    let n0 = wg_max(lid, a);
    var b = 0.0;
    for (var i = lid; i < n2; i = i + 256u) { b = max(b, abs(sa[b1 + i])); }
    let n1 = wg_max(lid, b);
    let gm = sqrt(n0 * n1);
    let f0 = gm / n0; let f1 = gm / n1;
    for (var i = lid; i < m2; i = i + 256u) { q[b0 + i] = q[b0 + i] * f0; }
    for (var i = lid; i < n2; i = i + 256u) { sa[b1 + i] = sa[b1 + i] * f1; }
}

// A caller's probe holding inf or NaN (found on the host) fails a checked step's inf/NaN check, as such a grad does:
// the global record's NONFINITE word (kp.word) of the optimizer's record buffer is set, after the check and before
// the gate. (Dispatched only then.)
@group(0) @binding(17) var<storage, read_write> flag: array<u32>;
@compute @workgroup_size(1)
fn kron_nonfinite() { flag[kp.word] = 1u; }
