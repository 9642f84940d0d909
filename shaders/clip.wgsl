// Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_ semantics), no host round trip:
//   partial (blocks):         per-block sum of |g|^2 (norm 2), |g| (1), |g|^p (p), or max |g| (inf), over the
//                             block table (used when only some tensors count: those with a grad this step)
//   flat (whole chunk):       the same partial sums when every tensor counts: a fixed number of workgroups
//                             strides over the chunk, U independent vec4 loads per thread per round, one slot
//                             per workgroup (scratch is bound at this chunk's region). Padding between tensors
//                             is zero (arenas are zero-filled and only tensor ranges are ever written), so it
//                             adds nothing to any norm and never looks non-finite.
//   total   (one workgroup):  total = the norm over every counted tensor; c = min(max_norm/(total + 1e-6), 1);
//                             writes c into the global record's grad multiplier (word 0) and total into word 5
//   scale   (blocks):         g *= c  (the stand-alone rlx_gpu.clip_grad_norm; the fused optimizer option
//                             leaves the grads alone and its step kernels multiply by word 0 instead)
//   kind 4 (finite check): partial/total set word 6 to 1 when any counted grad is inf or NaN, tested on the
//                          u32 bit pattern (exponent all ones), since compilers may assume floats are finite
// Global record (after the n tensor records): 0 grad multiplier, 1 max_norm, 2 kind (0: 2, 1: 1, 2: inf,
// 3: p, 4: finite check), 3 p, 4 count every tensor (1) or only those with a grad this step (0), 5 total norm
// (written here), 6 non-finite found (written here), 7 inv_scale: the loss-scale factor the grads carry,
// 8 inv_scale comes from a GradScaler's buffer (shaders/gate.wgsl)
// NaN and inf as torch's clip_grad_norm_ gives them: a NaN grad makes the total NaN and the factor NaN (every
// grad becomes NaN), an inf grad or a sum past float32's range makes it inf and the factor 0. Sums overflow by
// themselves; maxima and the factor's min() go through the bit-pattern helpers (WGSL leaves NaN to max/min).
// #include "ieee.wgsl"

const REC: u32 = 16u;
const ACTIVE: u32 = 1u;
override WG: u32 = 256u;
override EPT: u32 = 2u;
override BPW: u32 = 1u;  // blocks per workgroup in the partial pass (more bytes in flight per thread)
override CHECK: bool = false;  // the pipelines of the inf/NaN check: kind 4 whatever word 2 says
override U: u32 = 8u;  // vec4 loads per thread per round of the flat pass

@group(0) @binding(0) var<storage, read_write> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> blocks: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> grad: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> scratch: array<f32>;

var<workgroup> red: array<f32, WG>;

fn glob() -> u32 { return (arrayLength(&hyper) / REC - 1u) * REC; }
fn gf(k: u32) -> f32 { return bitcast<f32>(hyper[glob() + k]); }

fn kind_of() -> u32 { return select(hyper[glob() + 2u], 4u, CHECK); }

fn combine(a: f32, b: f32, kind: u32) -> f32 {
    if (kind == 2u || kind == 4u) { return nan_max(a, b); }
    return a + b;
}

fn reduce(lid: u32, kind: u32) {
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = combine(red[lid], red[lid + s], kind); }
    }
    workgroupBarrier();
}

// acc combined with |x| of one vec4 for this kind (kind 4: 1 if any lane is inf or NaN)
fn fold(acc: f32, x: vec4<f32>, kind: u32, p: f32) -> f32 {
    let a = abs(x);
    if (kind == 4u) { return select(acc, 1.0, !all(is_finite4(a))); }
    if (kind == 0u) { return acc + dot(a, a); }
    if (kind == 1u) { return acc + a.x + a.y + a.z + a.w; }
    if (kind == 2u) { return nan_max(acc, nan_max(nan_max(a.x, a.y), nan_max(a.z, a.w))); }
    return acc + dot(select(pow(a, vec4<f32>(p)), a, is_nan4(a)), vec4<f32>(1.0));
}

@compute @workgroup_size(WG)
fn partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let b0 = (wid.x + wid.y * nwg.x) * BPW;
    let nb = arrayLength(&blocks);
    if (b0 >= nb) { return; }
    let kind = kind_of();
    let p = gf(3u);
    let all = hyper[glob() + 4u] != 0u;
    var acc = 0.0;
    for (var j = 0u; j < BPW; j++) {
        if (b0 + j >= nb) { break; }
        let blk = blocks[b0 + j];
        if (!all && (hyper[blk.x * REC] & ACTIVE) == 0u) { continue; }
        for (var k = 0u; k < EPT; k++) {
            let i = blk.y + k * WG + lid;
            if (4u * i < blk.z) {
                acc = fold(acc, select(grad[i], vec4<f32>(0.0), vec4<u32>(4u * i) + vec4<u32>(0u, 1u, 2u, 3u)
                                       >= vec4<u32>(blk.z)), kind, p);
            }
        }
    }
    red[lid] = acc;
    reduce(lid, kind);
    // one slot per group of BPW blocks (the first block's); the others stay zero
    if (lid == 0u) { scratch[blocks[b0].w] = red[0]; }
}

@compute @workgroup_size(WG)
fn flat(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    let stride = nwg.x * nwg.y * WG * U;
    let n = arrayLength(&grad);
    let kind = kind_of();
    let p = gf(3u);
    var acc = 0.0;
    for (var base = w * WG * U + lid; base < n; base = base + stride) {
        for (var k = 0u; k < U; k++) {
            let i = base + k * WG;
            if (i < n) { acc = fold(acc, grad[i], kind, p); }
        }
    }
    red[lid] = acc;
    reduce(lid, kind);
    if (lid == 0u) { scratch[w] = red[0]; }
}

@compute @workgroup_size(WG)
fn total(@builtin(local_invocation_index) lid: u32) {
    let kind = kind_of();
    var acc = 0.0;
    for (var j = lid; j < arrayLength(&scratch); j = j + WG) { acc = combine(acc, scratch[j], kind); }
    red[lid] = acc;
    reduce(lid, kind);
    if (lid == 0u) {
        if (kind == 4u) {
            hyper[glob() + 6u] = select(0u, 1u, red[0] > 0.0);
            return;
        }
        var t = red[0];
        if (kind == 0u) { t = sqrt(t); } else if (kind == 3u) { t = select(pow(t, 1.0 / gf(3u)), t, is_nan(t)); }
        t = t * gf(7u);  // the norm of the unscaled grads
        let q = gf(1u) / (t + 1e-6);
        let c = select(min(q, 1.0), q, is_nan(q));  // torch's clamp(max=1) keeps a NaN
        hyper[glob()] = bitcast<u32>(c * gf(7u));
        hyper[glob() + 5u] = bitcast<u32>(t);
    }
}

@compute @workgroup_size(WG)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let b = wid.x + wid.y * nwg.x;
    if (b >= arrayLength(&blocks)) { return; }
    let blk = blocks[b];
    let c = gf(0u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i < blk.z) { grad[i] = grad[i] * c; }
    }
}
