// Eigenbases on the GPU (rlx_gpu/linalg/eigen.py): one-sided Jacobi on the rows of batches of square matrices, and
// what orders and gathers vectors by their eigenvalue estimates. Parameters by name (structs in linalg/eigen.py).
//   jacobi_reset  the round counter and the per-sweep rotation counts to zero
//   jacobi_round  one round of the round-robin ordering (each index in one pair, mp / 2 pairs, mp = m rounded up to
//                 even; index mp - 1 fixed, the others turning): rows p, q of F made orthogonal by a rotation, which
//                 rows p, q of U get too; skipped where |f_p . f_q| <= tol |f_p| |f_q| and, after the first sweep,
//                 for a matrix whose previous sweep rotated nothing (counted: with stop > 0, the rotations whose
//                 |f_p . f_q| was above stop ||F||_F^2; stop = 0 counts every one). The round number comes from the
//                 device (two counters, read one, written the other by workgroup 0), so every round is the same
//                 dispatch.
//   jacobi_trace  ||F||_F^2 of each matrix (one workgroup a matrix), its bits into cnt after the sweeps' counts
//   col_dots      est[j] = sum_r A[r][j] B[r][j] (strided: rows of a matrix as columns)
//   rank_order    order[rank_j] = j, rank_j = #{k: est_k > est_j, or est_k == est_j and k < j} (descending, stable)
//   gather        dst[r][k] = src[r][order[k]] (strides along r and along the gathered index); gather_norm: divided
//                 by sqrt(est[order[k]]) (0 where that is 0)
//   flag_reset, nonfinite  flag[z] = 1 where matrix z holds inf or NaN (flags in `order`, zeroed first)
//   nan_where     dst matrix z = NaN where flag[z] (the NaN's bits a parameter: WGSL has no NaN constant)

@group(0) @binding(0) var<storage, read_write> F: array<f32>;
@group(0) @binding(1) var<storage, read_write> U: array<f32>;
@group(0) @binding(2) var<storage, read_write> cnt: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read> jp: JacobiParams;
@group(0) @binding(4) var<storage, read> A: array<f32>;
@group(0) @binding(5) var<storage, read> B: array<f32>;
@group(0) @binding(6) var<storage, read_write> est: array<f32>;
@group(0) @binding(7) var<storage, read_write> order: array<u32>;
@group(0) @binding(8) var<storage, read> op: OrderParams;

// #include "matrix_common.wgsl"

@compute @workgroup_size(256)
fn jacobi_reset(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < 2u + jp.batch * jp.sweeps) { atomicStore(&cnt[jp.cnt_off + i], 0u); }
}

@compute @workgroup_size(256)
fn jacobi_trace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    let live = z < jp.batch;
    let f0 = jp.f_off + select(0u, z, live) * jp.f_bs;
    var s = 0.0;
    if (live) {
        for (var i = lid; i < jp.m * jp.m; i += 256u) { let x = F[f0 + (i / jp.m) * jp.ldf + i % jp.m]; s += x * x; }
    }
    let t = wg_sum(lid, s);
    if (live && lid == 0u) { atomicStore(&cnt[jp.cnt_off + 2u + jp.batch * jp.sweeps + z], bitcast<u32>(t)); }
}

var<workgroup> ra: array<f32, 64>;
var<workgroup> rb: array<f32, 64>;
var<workgroup> rc: array<f32, 64>;

@compute @workgroup_size(64)
fn jacobi_round(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    let ok = w < jp.pairs * jp.batch;
    let z = select(0u, w / jp.pairs, ok);
    let k = w % jp.pairs;
    let round = atomicLoad(&cnt[jp.cnt_off + jp.parity]);
    let turn = jp.mp - 1u;
    let sweep = round / turn; let rr = round % turn;
    var p = turn; var q = rr;
    if (k > 0u) { p = (rr + k) % turn; q = (rr + turn - k) % turn; }
    var live = ok && p < jp.m && q < jp.m && sweep < jp.sweeps;
    if (live && sweep > 0u) { live = atomicLoad(&cnt[jp.cnt_off + 2u + z * jp.sweeps + sweep - 1u]) != 0u; }
    let fp = jp.f_off + z * jp.f_bs + p * jp.ldf; let fq = jp.f_off + z * jp.f_bs + q * jp.ldf;
    var a = 0.0; var b = 0.0; var c = 0.0;
    if (live) {
        for (var i = lid; i < jp.m; i += 64u) { let x = F[fp + i]; let y = F[fq + i]; a += x * x; b += y * y; c += x * y; }
    }
    ra[lid] = a; rb[lid] = b; rc[lid] = c;
    workgroupBarrier();
    for (var d = 32u; d > 0u; d = d / 2u) {
        if (lid < d) { ra[lid] += ra[lid + d]; rb[lid] += rb[lid + d]; rc[lid] += rc[lid + d]; }
        workgroupBarrier();
    }
    let aa = ra[0]; let bb = rb[0]; let cc = rc[0];
    if (live && abs(cc) > jp.tol * sqrt(aa) * sqrt(bb)) {
        let zeta = (bb - aa) / (2.0 * cc);
        var t = select(-1.0, 1.0, zeta >= 0.0) / (abs(zeta) + sqrt(1.0 + zeta * zeta));
        if (abs(zeta) > 1e15) { t = 0.5 / zeta; }
        let cs = inverseSqrt(1.0 + t * t); let sn = cs * t;
        for (var i = lid; i < jp.m; i += 64u) {
            let x = F[fp + i]; let y = F[fq + i];
            F[fp + i] = cs * x - sn * y; F[fq + i] = sn * x + cs * y;
        }
        let up = jp.u_off + z * jp.u_bs + p * jp.ldu; let uq = jp.u_off + z * jp.u_bs + q * jp.ldu;
        for (var i = lid; i < jp.m; i += 64u) {
            let x = U[up + i]; let y = U[uq + i];
            U[up + i] = cs * x - sn * y; U[uq + i] = sn * x + cs * y;
        }
        var bound = 0.0;  // (stop 0: every rotation counts, |cc| > tol |f_p| |f_q| >= 0)
        if (jp.stop > 0.0) {
            bound = jp.stop * bitcast<f32>(atomicLoad(&cnt[jp.cnt_off + 2u + jp.batch * jp.sweeps + z]));
        }
        if (lid == 0u && abs(cc) > bound) {
            atomicAdd(&cnt[jp.cnt_off + 2u + z * jp.sweeps + sweep], 1u);
        }
    }
    if (w == 0u && lid == 0u) { atomicStore(&cnt[jp.cnt_off + 1u - jp.parity], round + 1u); }
}

@compute @workgroup_size(256)
fn col_dots(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= op.cols * op.batch) { return; }
    let z = i / op.cols; let j = i % op.cols;
    let a0 = op.s_off + z * op.s_bs + j * op.s_sk; let b0 = op.t_off + z * op.t_bs + j * op.s_sk;
    var s = 0.0;
    for (var r = 0u; r < op.rows; r++) { s += A[a0 + r * op.s_sr] * B[b0 + r * op.s_sr]; }
    est[op.e_off + z * op.e_bs + j] = s;
}

@compute @workgroup_size(256)
fn rank_order(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= op.cols * op.batch) { return; }
    let z = i / op.cols; let j = i % op.cols;
    let e0 = op.e_off + z * op.e_bs;
    let v = est[e0 + j];
    var rank = 0u;
    for (var k = 0u; k < op.cols; k++) {
        let u = est[e0 + k];
        if (u > v || (u == v && k < j)) { rank += 1u; }
    }
    order[op.o_off + z * op.o_bs + rank] = j;
}

fn gathered(i: u32) -> vec3<u32> {  // (matrix, r, the source index order[k]) of output i
    let per = op.rows * op.cols;
    let z = i / per; let k = i % op.cols;
    return vec3<u32>(z, (i % per) / op.cols, order[op.o_off + z * op.o_bs + k]);
}

fn put(i: u32, v: f32) {
    let per = op.rows * op.cols;
    F[op.d_off + (i / per) * op.d_bs + ((i % per) / op.cols) * op.ldd + i % op.cols] = v;
}

@compute @workgroup_size(256)
fn gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= op.rows * op.cols * op.batch) { return; }
    let t = gathered(i);
    put(i, A[op.s_off + t.x * op.s_bs + t.y * op.s_sr + t.z * op.s_sk]);
}

@compute @workgroup_size(256)
fn gather_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= op.rows * op.cols * op.batch) { return; }
    let t = gathered(i);
    let e = est[op.e_off + t.x * op.e_bs + t.z];
    let v = A[op.s_off + t.x * op.s_bs + t.y * op.s_sr + t.z * op.s_sk];
    put(i, select(0.0, v / sqrt(e), e > 0.0));
}

@compute @workgroup_size(256)
fn flag_reset(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < op.batch) { order[op.o_off + i] = 0u; }
}

@compute @workgroup_size(256)
fn nonfinite(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let per = op.rows * op.cols;
    if (i >= per * op.batch) { return; }
    let z = i / per;
    let v = A[op.s_off + z * op.s_bs + ((i % per) / op.cols) * op.s_sr + (i % per) % op.cols];
    if ((bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u) { order[op.o_off + z] = 1u; }  // (inf or NaN)
}

@compute @workgroup_size(256)
fn nan_where(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let per = op.rows * op.cols;
    if (i >= per * op.batch) { return; }
    let z = i / per;
    if (order[op.o_off + z] != 0u) {
        F[op.d_off + z * op.d_bs + ((i % per) / op.cols) * op.ldd + (i % per) % op.cols] = bitcast<f32>(op.nan);
    }
}
