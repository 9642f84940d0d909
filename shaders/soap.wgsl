// SOAP's elementwise parts (rlx_gpu/optim/soap.py); the projections and the GG products between them are
// rlx_gpu/linalg.py's batched GEMMs. Per shape, the work buffers hold the shape's matrices back to back:
//   gs: the grads (times grad_mul); ms: exp_avg, then its projection, then the preconditioned direction;
//   ps: the grads' projection, then the update u.
//   soap_gather:  g = grad * grad_mul -> gs; (updating) exp_avg = lerp(exp_avg, g, 1 - beta1) -> ms
//   soap_precond: exp_avg_sq = lerp(exp_avg_sq, ps^2, 1 - beta2); ms = ms / (sqrt(exp_avg_sq) + eps)
//   soap_apply:   p = (p + (-step_size) * u [/ nrm]) * (1 - lr * weight_decay)
// mp (one record per tensor piece): [count, offset in the chunk, offset in the work buffers, flags (1: update,
//     2: normalize), grad_mul word, the matrix's slot, 1 - beta1, 1 - beta2, eps, -step_size, decay] (words 6..
//     are float32 bits).

@group(0) @binding(0) var<storage, read> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> ea: array<f32>;
@group(0) @binding(3) var<storage, read_write> ev: array<f32>;
@group(0) @binding(4) var<storage, read_write> param: array<f32>;
@group(0) @binding(5) var<storage, read_write> gs: array<f32>;
@group(0) @binding(6) var<storage, read_write> ms: array<f32>;
@group(0) @binding(7) var<storage, read_write> ps: array<f32>;
@group(0) @binding(8) var<storage, read_write> nrm: array<f32>;
@group(0) @binding(9) var<storage, read> mp: array<u32>;

// #include "matrix_common.wgsl"

fn f(k: u32) -> f32 { return bitcast<f32>(mp[k]); }

@compute @workgroup_size(256)
fn soap_gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp[0]) { return; }
    let g = grad[mp[1] + i] * bitcast<f32>(hyper[mp[4]]);
    gs[mp[2] + i] = g;
    if ((mp[3] & 1u) != 0u) {
        let e = lerp1(ea[mp[1] + i], g, f(6u));
        ea[mp[1] + i] = e;
        ms[mp[2] + i] = e;
    }
}

@compute @workgroup_size(256)
fn soap_precond(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp[0]) { return; }
    let gp = ps[mp[2] + i];
    let v = lerp1(ev[mp[1] + i], gp * gp, f(7u));
    ev[mp[1] + i] = v;
    ms[mp[2] + i] = ms[mp[2] + i] / (sqrt(v) + f(8u));
}

@compute @workgroup_size(256)
fn soap_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp[0]) { return; }
    var u = ps[mp[2] + i];
    if ((mp[3] & 2u) != 0u) { u = u / nrm[mp[5]]; }
    let q = param[mp[1] + i] + f(9u) * u;
    param[mp[1] + i] = q * f(10u);
}

// Run-level kernels (prm, not per piece): a lerp over a run of matrices, and the normalising factor of each.
@group(0) @binding(10) var<storage, read_write> dst: array<f32>;
@group(0) @binding(11) var<storage, read> src: array<f32>;
@group(0) @binding(12) var<storage, read> prm: array<u32>;

// dst[dst offset + i] = lerp(dst[...], src[src offset + i], w); prm: [count, dst offset, src offset, w bits]
@compute @workgroup_size(256)
fn soap_lerp(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    dst[prm[1] + i] = lerp1(dst[prm[1] + i], src[prm[2] + i], bitcast<f32>(prm[3]));
}

// dst[slot0 + z] = sqrt(mean(src matrix z ^ 2)) + eps for the run's matrices (workgroup z);
// prm: [elements a matrix, offset of the first, batch, eps bits, slot0]
@compute @workgroup_size(256)
fn soap_rms(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= prm[2]) { return; }  // (uniform for the workgroup)
    let n = prm[0];
    let base = prm[1] + z * n;
    var s = 0.0;
    for (var i = lid; i < n; i = i + 256u) { let v = src[base + i]; s = s + v * v; }
    let t = wg_sum(lid, s);
    if (lid == 0u) { dst[prm[4] + z] = sqrt(t / f32(n)) + bitcast<f32>(prm[3]); }
}
