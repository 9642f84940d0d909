// Muon's elementwise halves (rlx_gpu/optim/muon.py); Newton-Schulz between them is rlx_gpu/linalg.py's GEMMs.
//   muon_momentum: b = lerp(b, g * grad_mul, 1 - momentum); u = lerp(g, b, momentum) if nesterov else b; u -> scratch
//   muon_apply:    p = p * (1 - lr * weight_decay) + (-adjusted_lr) * u
// mp (one record per tensor piece): [count, offset in the chunk, offset in the scratch, nesterov, grad_mul word,
//     1 - momentum, momentum, decay, -adjusted_lr] (words 5.. are float32 bits).

@group(0) @binding(0) var<storage, read> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> buf: array<f32>;
@group(0) @binding(3) var<storage, read_write> param: array<f32>;
@group(0) @binding(4) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(5) var<storage, read> mp: array<u32>;

// #include "matrix_common.wgsl"

fn f(k: u32) -> f32 { return bitcast<f32>(mp[k]); }

@compute @workgroup_size(256)
fn muon_momentum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp[0]) { return; }
    let g = grad[mp[1] + i] * bitcast<f32>(hyper[mp[4]]);
    let b = lerp1(buf[mp[1] + i], g, f(5u));
    buf[mp[1] + i] = b;
    scratch[mp[2] + i] = select(b, lerp1(g, b, f(6u)), mp[3] != 0u);
}

@compute @workgroup_size(256)
fn muon_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= mp[0]) { return; }
    param[mp[1] + i] = param[mp[1] + i] * f(7u) + f(8u) * scratch[mp[2] + i];
}
