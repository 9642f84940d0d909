// Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_ semantics) and the inf/NaN check, over an
// optimizer's records and one bucket's typed `grad` arena (rlx_gpu/engine/codegen.py engine_module), no host
// round trip:
//   partial (blocks):         per-block sum of |g|^2 (norm 2), |g| (1), |g|^p (p), or max |g| (inf), over the
//                             block table (when only some tensors count: those with a grad this step)
//   flat (whole chunk):       the same partial sums when every tensor counts: a fixed number of workgroups strides
//                             over the chunk, U independent vec4 loads per thread per round, one slot per workgroup
//                             (scratch bound at this chunk's region). Padding between tensors is zero (arenas are
//                             zero-filled, only tensor ranges are written), so it adds nothing and is never non-finite.
//   total   (one workgroup):  total = the norm over every slot; c = min(max_norm/(total + 1e-6), 1) into the global
//                             GRAD_MUL word (times INV_SCALE), total into TOTAL_NORM
//   scale   (blocks):         g *= c (the stand-alone clip; the fused option leaves the grads alone and the step's
//                             kernels multiply by GRAD_MUL instead)
//   CHECK: the same passes also flag a grad that is inf or NaN (on the bit pattern), and total sets NONFINITE; NORM
//   off: a check alone (no clip factor). A checked, clipped step takes both in one read of the grads.
// NaN and inf as torch gives them: a NaN grad makes the total NaN and the factor NaN, an inf grad or a sum past
// float32's range makes it inf and the factor 0. Maxima and the factor's min() go through ieee.wgsl's helpers.
override BPW: u32 = 1u;  // blocks per workgroup in the partial pass (more bytes in flight per thread)
override CHECK: bool = false;  // also flag inf/NaN grads (NONFINITE)
override NORM: bool = true;    // compute the norm and the clip factor
override U: u32 = 8u;  // vec4 loads per thread per round of the flat pass

@group(0) @binding(N) var<storage, read_write> scratch: array<vec2<f32>>;  // (norm partial, inf/NaN flag)

fn gword(k: u32) -> u32 { return hyper[glob_base() + k]; }
fn gf(k: u32) -> f32 { return bitcast<f32>(gword(k)); }
fn kind_of() -> u32 { return gword(GLOB_NORM_KIND); }

fn combine(a: f32, b: f32, kind: u32) -> f32 {
    if (kind == 2u) { return nan_max(a, b); }
    return a + b;
}

// (norm partial, inf/NaN flag) pairs combined across the workgroup
fn reduce_kind(lid: u32, kind: u32) {
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) {
            red2[lid] = vec2<f32>(combine(red2[lid].x, red2[lid + s].x, kind), max(red2[lid].y, red2[lid + s].y));
        }
    }
    workgroupBarrier();
}

// acc (norm partial, flag) combined with one vec4 of grads
fn fold(acc: vec2<f32>, x: vec4<f32>, kind: u32, p: f32) -> vec2<f32> {
    let a = abs(x);
    var out = acc;
    if (CHECK) { out.y = select(out.y, 1.0, !all(is_finite4(a))); }
    if (NORM) {
        if (kind == 0u) { out.x = out.x + dot(a, a); }
        else if (kind == 1u) { out.x = out.x + a.x + a.y + a.z + a.w; }
        else if (kind == 2u) { out.x = nan_max(out.x, nan_max(nan_max(a.x, a.y), nan_max(a.z, a.w))); }
        else { out.x = out.x + dot(select(pow(a, vec4<f32>(p)), a, is_nan4(a)), vec4<f32>(1.0)); }
    }
    return out;
}

@compute @workgroup_size(WG)
fn partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let b0 = (wid.x + wid.y * nwg.x) * BPW;
    let nb = arrayLength(&blocks);
    if (b0 >= nb) { return; }
    let kind = kind_of();
    let p = gf(GLOB_NORM_P);
    let all = gword(GLOB_COUNT_ALL) != 0u;
    var acc = vec2<f32>(0.0);
    for (var j = 0u; j < BPW; j++) {
        if (b0 + j >= nb) { break; }
        let blk = blocks[b0 + j];
        if (!all && (hyper[blk.tensor * REC + REC_FLAGS] & ACTIVE) == 0u) { continue; }
        for (var k = 0u; k < EPT; k++) {
            let i = blk.first + k * WG + lid;
            if (4u * i < blk.end) { acc = fold(acc, select(ld_grad(i), vec4<f32>(0.0), tail(i, blk.end)), kind, p); }
        }
    }
    red2[lid] = acc;
    reduce_kind(lid, kind);
    // one slot per group of BPW blocks (the first block's); the others stay zero
    if (lid == 0u) { scratch[blocks[b0].block] = red2[0]; }
}

@compute @workgroup_size(WG)
fn flat(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    let stride = nwg.x * nwg.y * WG * U;
    let n = arrayLength(&grad);
    let kind = kind_of();
    let p = gf(GLOB_NORM_P);
    var acc = vec2<f32>(0.0);
    for (var base = w * WG * U + lid; base < n; base = base + stride) {
        for (var k = 0u; k < U; k++) {
            let i = base + k * WG;
            if (i < n) { acc = fold(acc, ld_grad(i), kind, p); }
        }
    }
    red2[lid] = acc;
    reduce_kind(lid, kind);
    if (lid == 0u) { scratch[w] = red2[0]; }
}

@compute @workgroup_size(WG)
fn total(@builtin(local_invocation_index) lid: u32) {
    let kind = kind_of();
    var acc = vec2<f32>(0.0);
    for (var j = lid; j < arrayLength(&scratch); j = j + WG) {
        acc = vec2<f32>(combine(acc.x, scratch[j].x, kind), max(acc.y, scratch[j].y));
    }
    red2[lid] = acc;
    reduce_kind(lid, kind);
    if (lid == 0u) {
        let g = glob_base();
        if (CHECK) { hyper[g + GLOB_NONFINITE] = select(0u, 1u, red2[0].y > 0.0); }
        if (!NORM) { return; }
        var t = red2[0].x;
        if (kind == 0u) { t = sqrt(t); } else if (kind == 3u) { t = select(pow(t, 1.0 / gf(GLOB_NORM_P)), t, is_nan(t)); }
        t = t * gf(GLOB_INV_SCALE);  // the norm of the unscaled grads
        let q = gf(GLOB_MAX_NORM) / (t + 1e-6);
        let c = select(min(q, 1.0), q, is_nan(q));  // torch's clamp(max=1) keeps a NaN
        hyper[g + GLOB_GRAD_MUL] = bitcast<u32>(c * gf(GLOB_INV_SCALE));
        hyper[g + GLOB_TOTAL_NORM] = bitcast<u32>(t);
    }
}

@compute @workgroup_size(WG)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let b = wid.x + wid.y * nwg.x;
    if (b >= arrayLength(&blocks)) { return; }
    let blk = blocks[b];
    let c = gf(GLOB_GRAD_MUL);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.first + k * WG + lid;
        if (4u * i < blk.end) { st_grad(i, select(ld_grad(i) * c, ld_grad(i), tail(i, blk.end))); }
    }
}
