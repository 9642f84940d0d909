// A step gated on its own inf/NaN check, with no host round trip (skip_nonfinite, a loss scale), over an
// optimizer's records (rlx_gpu/engine/codegen.py engine_module; the steps: rlx_gpu/engine/steps.py):
//   choose (one thread per word): hyper = the candidate records for the outcome of the previous checked step.
//          The host cannot know that outcome yet, so it writes two record sets, [0, N) as if the previous step
//          was applied and [N, 2N) as if it was skipped (step counts, bias corrections, fresh state differ);
//          this pass picks one on the device. With a device loss scale (global DEVICE_SCALE), the grad multiplier
//          and inv_scale are 1/scale read from the loss scale's words (scale at word 0).
//   (the check: clip.wgsl with CHECK, which sets the global NONFINITE word when a grad is inf or NaN)
//   gate_step (one workgroup): gate[0] = NONFINITE (the outcome the next step's choose reads), and when it is set,
//          zero the grids of every dispatch of this step that follows (indirect dispatches reading gate[4..]), so
//          that nothing changes: params, state and step counts stay bit-identical. A skipped step's gradient norm
//          is NaN (no norm was taken), and with a device loss scale its found-inf word (word 2) is set.
// The host reads gate[0] back later (a copy into a small mappable buffer), only to settle its own bookkeeping.

@group(0) @binding(N) var<storage, read> cand: array<u32>;
@group(0) @binding(N) var<storage, read_write> gate: array<u32>;
@group(0) @binding(N) var<storage, read_write> loss_scale: array<u32>;  // a dummy without a device loss scale

@compute @workgroup_size(WG)
fn choose(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = arrayLength(&hyper);
    let i = gid.x;
    if (i >= n) { return; }
    let off = select(0u, n, gate[0] != 0u);
    let g = glob_base();
    var v = cand[i + off];
    if (cand[g + GLOB_DEVICE_SCALE + off] != 0u && (i == g + GLOB_GRAD_MUL || i == g + GLOB_INV_SCALE)) {
        v = bitcast<u32>(1.0 / bitcast<f32>(loss_scale[0]));
    }
    hyper[i] = v;
}

@compute @workgroup_size(WG)
fn gate_step(@builtin(local_invocation_index) lid: u32) {
    let g = glob_base();
    let skip = hyper[g + GLOB_NONFINITE];
    if (skip != 0u) {
        for (var i = 4u + lid; i < arrayLength(&gate); i = i + WG) { gate[i] = 0u; }
    }
    if (lid == 0u) {
        gate[0] = skip;
        if (skip != 0u) {
            hyper[g + GLOB_TOTAL_NORM] = 0x7fc00000u;
            if (hyper[g + GLOB_DEVICE_SCALE] != 0u) { loss_scale[2] = 1u; }
        }
    }
}
