// Muon's update straight from Newton-Schulz's float16 result (rlx_gpu/optim/muon.py, Muon.fuse_out): for a matrix
// Newton-Schulz does not transpose, its ns_out (u = f32(W) / scale into the scratch) and muon_apply (p = p decay +
// neg_lr u) in one pass, the same values without the scratch's write and read.
//   muon_apply16: p = p * (1 - lr * weight_decay) + (-adjusted_lr) * (f32(wh[w_off + i]) / w_scale), 4 a thread
// mp: shaders/muon.wgsl's record of a tensor piece (struct MuonPiece); w_off (a multiple of 4) and w_scale set.
enable f16;

@group(0) @binding(0) var<storage, read_write> param4: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> wh4: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> mp: MuonPiece;

// #include "matrix_common.wgsl"

@compute @workgroup_size(256)
fn muon_apply16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let q = flat_index(wid, nwg, lid);
    if (q >= mp.count / 4u) { return; }
    let e = mp.chunk_off / 4u + q;
    param4[e] = param4[e] * mp.decay + mp.neg_lr * (vec4<f32>(wh4[mp.w_off / 4u + q]) / mp.w_scale);
}
