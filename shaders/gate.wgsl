// A step gated on its own inf/NaN check, with no host round trip (skip_nonfinite, a loss scale), over an
// optimizer's records (rlx_gpu/engine/codegen.py engine_module; the host side: rlx_gpu/engine/gating.py).
// gate: a Gate, cand: a Table, loss_scale: a LossScaleHead (the structs and LOG declared in rlx_gpu/engine/gating.py,
//       appended to this text). gate: the last step's skip flag, the steps applied and run (both counters wrap at
//       2^32), overrun (set when a step found no row for its applied count), log[j % LOG]: the skip flag of step j;
//       args: the dispatch arguments of the step's later (indirect) dispatches, 3 words each, then their pristine
//       copy. cand: words holds rows of arrayLength(&hyper) words: row a (selected by applied - applied0) holds the
//       records of the step taken after a applied steps of the host's run (step counts, bias corrections, fresh
//       state: rlx_gpu/engine/tables.py). The host need not know earlier outcomes to record a step.
//   choose (one thread per word): hyper = the row for (steps applied - applied0). With a device loss scale (global
//          DEVICE_SCALE), the grad multiplier and inv_scale are 1/scale read from the loss scale's words.
//   (the check: clip.wgsl with CHECK, which sets the global NONFINITE word when a grad is inf or NaN)
//   gate_step (one workgroup): the step's skip flag logged and counted; the later dispatches' grids restored from
//          the pristine copy, or zeroed when the step is skipped, so that nothing changes: params, state and step
//          counts stay bit-identical. A skipped step's gradient norm is NaN (no norm was taken), and with a device
//          loss scale its found-inf word (loss_scale.found) is set.
// The host copies the Gate's fixed fields back every few steps, or when asked, to settle its bookkeeping.

@group(0) @binding(N) var<storage, read> cand: Table;
@group(0) @binding(N) var<storage, read_write> gate: Gate;
// (the device loss scale's first words: the protocol of rlx_gpu/engine/steps.py)
@group(0) @binding(N) var<storage, read_write> loss_scale: LossScaleHead;  // a dummy without a device loss scale

@compute @workgroup_size(WG)
fn choose(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = arrayLength(&hyper);
    let i = gid.x;
    if (i >= n) { return; }
    var row = gate.applied - cand.applied0;
    if (row >= cand.rows) {
        row = cand.rows - 1u;
        if (i == 0u) { gate.overrun = 1u; }
    }
    let off = row * n;
    let g = glob_base();
    var v = cand.words[off + i];
    if (cand.words[off + g + GLOB_DEVICE_SCALE] != 0u && (i == g + GLOB_GRAD_MUL || i == g + GLOB_INV_SCALE)) {
        v = bitcast<u32>(1.0 / loss_scale.scale);
    }
    hyper[i] = v;
}

@compute @workgroup_size(WG)
fn gate_step(@builtin(local_invocation_index) lid: u32) {
    let g = glob_base();
    let skip = hyper[g + GLOB_NONFINITE];
    let words = 3u * (arrayLength(&gate.args) / 6u);  // (the arguments, then as many words of their copy)
    for (var i = lid; i < words; i = i + WG) { gate.args[i] = select(gate.args[words + i], 0u, skip != 0u); }
    if (lid == 0u) {
        let j = gate.steps;
        gate.log[j % LOG] = skip;
        gate.steps = j + 1u;
        gate.applied = gate.applied + select(1u, 0u, skip != 0u);
        gate.last_skip = skip;
        if (skip != 0u) {
            hyper[g + GLOB_TOTAL_NORM] = 0x7fc00000u;
            if (hyper[g + GLOB_DEVICE_SCALE] != 0u) { loss_scale.found = 1u; }
        }
    }
}
