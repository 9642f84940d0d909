// SOAP's elementwise parts (rlx_gpu/optim/soap.py); the projections and the GG products between them are
// rlx_gpu.linalg's batched GEMMs, the eigenbases rlx_gpu/optim/soap_basis.py's. Per shape, the work buffers hold the
// shape's matrices back to back:
//   gs: the grads (times grad_mul); ms: exp_avg, then its projection, then the preconditioned direction;
//   ps: the grads' projection, then the update u.
//   soap_gather:  g = grad * grad_mul -> gs; (updating) exp_avg = lerp(exp_avg, g, 1 - beta1) -> ms
//   soap_precond: exp_avg_sq = lerp(exp_avg_sq, ps^2, 1 - beta2); ms = ms / (sqrt(exp_avg_sq) + eps)
//   soap_apply:   p = (p + (-step_size) * u [/ nrm]) * (1 - lr * weight_decay)
//   soap_ev_out, soap_ev_in (a refresh on the device): exp_avg_sq copied into ts, then read back with its rows and
//                 columns in the refreshed order: ev[r][c] = ts[o0[r]][o1[c]]
// Parameters by name (rlx_gpu/optim/soap_basis.py): mp, one SoapPiece per tensor piece: count, chunk_off, work_off,
//     flags (1: update, 2: normalize), gm_word (grad_mul's hyper word), slot (the matrix's), omb1 = 1 - beta1,
//     omb2 = 1 - beta2, eps, neg_step = -step_size, decay = 1 - lr * weight_decay, toff (the piece's offset in its
//     tensor), rows, cols; rp, a SoapRun for the run-level kernels.

@group(0) @binding(0) var<storage, read> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> ea: array<f32>;
@group(0) @binding(3) var<storage, read_write> ev: array<f32>;
@group(0) @binding(4) var<storage, read_write> param: array<f32>;
@group(0) @binding(5) var<storage, read_write> gs: array<f32>;
@group(0) @binding(6) var<storage, read_write> ms: array<f32>;
@group(0) @binding(7) var<storage, read_write> ps: array<f32>;
@group(0) @binding(8) var<storage, read_write> nrm: array<f32>;
@group(0) @binding(9) var<storage, read> mp: SoapPiece;

// #include "matrix_common.wgsl"

@compute @workgroup_size(256)
fn soap_gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    let e = mp.chunk_off + i;
    let g = grad[e] * bitcast<f32>(hyper[mp.gm_word]);
    gs[mp.work_off + i] = g;
    if ((mp.flags & 1u) != 0u) {
        let a = lerp1(ea[e], g, mp.omb1);
        ea[e] = a;
        ms[mp.work_off + i] = a;
    }
}

@compute @workgroup_size(256)
fn soap_precond(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    let gp = ps[mp.work_off + i];
    let v = lerp1(ev[mp.chunk_off + i], gp * gp, mp.omb2);
    ev[mp.chunk_off + i] = v;
    ms[mp.work_off + i] = ms[mp.work_off + i] / (sqrt(v) + mp.eps);
}

@compute @workgroup_size(256)
fn soap_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    var u = ps[mp.work_off + i];
    if ((mp.flags & 2u) != 0u) { u = u / nrm[mp.slot]; }
    let q = param[mp.chunk_off + i] + mp.neg_step * u;
    param[mp.chunk_off + i] = q * mp.decay;
}

@group(0) @binding(13) var<storage, read_write> ts: array<f32>;
@group(0) @binding(14) var<storage, read> o0: array<u32>;
@group(0) @binding(15) var<storage, read> o1: array<u32>;

@compute @workgroup_size(256)
fn soap_ev_out(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    ts[mp.work_off + i] = ev[mp.chunk_off + i];
}

@compute @workgroup_size(256)
fn soap_ev_in(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    let e = mp.toff + i;
    let r = o0[mp.slot * mp.rows + e / mp.cols];
    let c = o1[mp.slot * mp.cols + e % mp.cols];
    ev[mp.chunk_off + i] = ts[mp.slot * mp.rows * mp.cols + r * mp.cols + c];
}

// Run-level kernels (rp: SoapRun, not per piece): a lerp over a run of matrices, and the normalising factor of each.
@group(0) @binding(10) var<storage, read_write> dst: array<f32>;
@group(0) @binding(11) var<storage, read> src: array<f32>;
@group(0) @binding(12) var<storage, read> rp: SoapRun;

// dst[dst_off + i] = lerp(dst[dst_off + i], src[src_off + i], w) for i < count
@compute @workgroup_size(256)
fn soap_lerp(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= rp.count) { return; }
    dst[rp.dst_off + i] = lerp1(dst[rp.dst_off + i], src[rp.src_off + i], rp.w);
}

// dst[slot0 + z] = sqrt(mean(src matrix z ^ 2)) + eps for the run's matrices (workgroup z; count elements each,
// from src_off)
@compute @workgroup_size(256)
fn soap_rms(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= rp.batch) { return; }  // (uniform for the workgroup)
    let n = rp.count;
    let base = rp.src_off + z * n;
    var s = 0.0;
    for (var i = lid; i < n; i = i + 256u) { let v = src[base + i]; s = s + v * v; }
    let t = wg_sum(lid, s);
    if (lid == 0u) { dst[rp.slot0 + z] = sqrt(t / f32(n)) + rp.eps; }
}
