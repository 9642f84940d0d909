// Muon's elementwise halves (rlx_gpu/optim/muon.py); Newton-Schulz between them is rlx_gpu/linalg.py's GEMMs.
//   muon_momentum: b = lerp(b, g * grad_mul, 1 - momentum); u = lerp(g, b, momentum) if nesterov else b; u -> scratch
//   muon_apply:    p = p * (1 - lr * weight_decay) + (-adjusted_lr) * u
//   muon_momentum4, muon_apply4: the same, 4 elements a thread by vec4s (pieces whose count, chunk_off and work_off
//                  are multiples of 4; grad4, buf4, param4, scratch4: the same buffers as vec4s), the same values
// mp (one record per tensor piece, struct MuonPiece: rlx_gpu/optim/muon.py): count, chunk_off (its offset in the
//     chunk), work_off (in the scratch), nesterov, gm_word (the hyper word of grad_mul), omm = 1 - momentum, mom,
//     decay = 1 - lr * weight_decay, neg_lr = -adjusted_lr.

@group(0) @binding(0) var<storage, read> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> buf: array<f32>;
@group(0) @binding(3) var<storage, read_write> param: array<f32>;
@group(0) @binding(4) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(5) var<storage, read> mp: MuonPiece;
@group(0) @binding(6) var<storage, read> grad4: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> buf4: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> param4: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> scratch4: array<vec4<f32>>;

// #include "matrix_common.wgsl"

@compute @workgroup_size(256)
fn muon_momentum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    let e = mp.chunk_off + i;
    let g = grad[e] * bitcast<f32>(hyper[mp.gm_word]);
    let b = lerp1(buf[e], g, mp.omm);
    buf[e] = b;
    scratch[mp.work_off + i] = select(b, lerp1(g, b, mp.mom), mp.nesterov != 0u);
}

@compute @workgroup_size(256)
fn muon_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp.count) { return; }
    param[mp.chunk_off + i] = param[mp.chunk_off + i] * mp.decay + mp.neg_lr * scratch[mp.work_off + i];
}

// lerp1 on each of four lanes
fn lerp4(a: vec4<f32>, b: vec4<f32>, w: f32) -> vec4<f32> {
    if (w < 0.5) { return a + w * (b - a); }
    return b - (b - a) * (1.0 - w);
}

@compute @workgroup_size(256)
fn muon_momentum4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let q = flat_index(wid, nwg, lid);
    if (q >= mp.count / 4u) { return; }
    let e = mp.chunk_off / 4u + q;
    let g = grad4[e] * bitcast<f32>(hyper[mp.gm_word]);
    let b = lerp4(buf4[e], g, mp.omm);
    buf4[e] = b;
    scratch4[mp.work_off / 4u + q] = select(b, lerp4(g, b, mp.mom), mp.nesterov != 0u);
}

@compute @workgroup_size(256)
fn muon_apply4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let q = flat_index(wid, nwg, lid);
    if (q >= mp.count / 4u) { return; }
    let e = mp.chunk_off / 4u + q;
    param4[e] = param4[e] * mp.decay + mp.neg_lr * scratch4[mp.work_off / 4u + q];
}
