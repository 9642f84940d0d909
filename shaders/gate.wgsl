// A step gated on its own inf/NaN check, with no host round trip (skip_nonfinite, GradScaler):
//   choose (one thread per word): hyper = the candidate records for the outcome of the previous checked step.
//          The host cannot know that outcome yet, so it writes two record sets, [0, N) as if the previous step
//          was applied and [N, 2N) as if it was skipped (step counts, bias corrections, fresh state differ);
//          this pass picks one on the device. With a GradScaler (global word 8 set), the grad multiplier and
//          inv_scale (global words 0 and 7) are 1/scale from the scaler's own buffer (shaders/amp.wgsl).
//   (the check: shaders/clip.wgsl with CHECK, which sets the global record's word 6 when a grad is inf or NaN)
//   gate (one workgroup): gate[0] = word 6 (the outcome the next step's choose reads), and when it is set,
//          zero the grids of every dispatch of this step that follows (they are indirect dispatches reading
//          gate[4..]), so that nothing changes: params, state and step counts stay bit-identical. A skipped
//          step's gradient norm (global word 5, read by last_grad_norm) is NaN: no norm was taken. With a
//          GradScaler, a skip also sets the scaler's found-inf word, which its update() reads on the device.
// The host reads gate[0] back later (a copy into a small mappable buffer), only to settle its own bookkeeping.
const REC: u32 = 16u;
override WG: u32 = 256u;

@group(0) @binding(0) var<storage, read_write> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> cand: array<u32>;
@group(0) @binding(2) var<storage, read_write> gate: array<u32>;
@group(0) @binding(3) var<storage, read_write> scaler: array<u32>;  // shaders/amp.wgsl's layout (a dummy without one)

@compute @workgroup_size(WG)
fn choose(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = arrayLength(&hyper);
    let i = gid.x;
    if (i >= n) { return; }
    let off = select(0u, n, gate[0] != 0u);
    let g = n - REC;
    var v = cand[i + off];
    if (cand[g + 8u + off] != 0u && (i == g || i == g + 7u)) {
        v = bitcast<u32>(1.0 / bitcast<f32>(scaler[0]));
    }
    hyper[i] = v;
}

@compute @workgroup_size(WG)
fn gate_step(@builtin(local_invocation_index) lid: u32) {
    let g = arrayLength(&hyper) - REC;  // the global record
    let skip = hyper[g + 6u];
    if (skip != 0u) {
        for (var i = 4u + lid; i < arrayLength(&gate); i = i + WG) { gate[i] = 0u; }
    }
    if (lid == 0u) {
        gate[0] = skip;
        if (skip != 0u) {
            hyper[g + 5u] = 0x7fc00000u;
            if (hyper[g + 8u] != 0u) { scaler[2] = 1u; }
        }
    }
}
