// A step gated on its own inf/NaN check, with no host round trip (skip_nonfinite, a loss scale), over an
// optimizer's records (rlx_gpu/engine/codegen.py engine_module; the host side: rlx_gpu/engine/gating.py).
// gate: [0] the last step's skip flag, [1] the steps applied, [2] the steps run (both counters wrap at 2^32),
//       [3] set when a step found no row for its applied count, [HEAD + j % LOG] the skip flag of step j, then
//       the dispatch arguments of the step's later (indirect) dispatches, 3 words each, then their pristine copy.
// cand: [0] the counter offset, [1] the rows, from word TABLE_HEAD rows of arrayLength(&hyper) words: row a holds
//       the records of the step taken after a applied steps of the host's run (step counts, bias corrections,
//       fresh state: rlx_gpu/engine/tables.py). The host need not know earlier outcomes to record a step.
//   choose (one thread per word): hyper = the row for (steps applied - offset). With a device loss scale (global
//          DEVICE_SCALE), the grad multiplier and inv_scale are 1/scale read from the loss scale's words.
//   (the check: clip.wgsl with CHECK, which sets the global NONFINITE word when a grad is inf or NaN)
//   gate_step (one workgroup): the step's skip flag logged and counted; the later dispatches' grids restored from
//          the pristine copy, or zeroed when the step is skipped, so that nothing changes: params, state and step
//          counts stay bit-identical. A skipped step's gradient norm is NaN (no norm was taken), and with a device
//          loss scale its found-inf word (loss_scale.found, word 2) is set.
// The host copies words [0, HEAD + LOG) back every few steps, or when asked, to settle its bookkeeping.

const HEAD: u32 = 8u;
const LOG: u32 = 64u;
const TABLE_HEAD: u32 = 16u;

@group(0) @binding(N) var<storage, read> cand: array<u32>;
@group(0) @binding(N) var<storage, read_write> gate: array<u32>;
// The device loss scale's first words (the protocol of rlx_gpu/engine/steps.py; GradScaler's LossScale begins so)
struct LossScaleHead { scale: f32, tracker: u32, found: u32, }
@group(0) @binding(N) var<storage, read_write> loss_scale: LossScaleHead;  // a dummy without a device loss scale

@compute @workgroup_size(WG)
fn choose(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = arrayLength(&hyper);
    let i = gid.x;
    if (i >= n) { return; }
    var row = gate[1] - cand[0];
    if (row >= cand[1]) {
        row = cand[1] - 1u;
        if (i == 0u) { gate[3] = 1u; }
    }
    let off = TABLE_HEAD + row * n;
    let g = glob_base();
    var v = cand[off + i];
    if (cand[off + g + GLOB_DEVICE_SCALE] != 0u && (i == g + GLOB_GRAD_MUL || i == g + GLOB_INV_SCALE)) {
        v = bitcast<u32>(1.0 / loss_scale.scale);
    }
    hyper[i] = v;
}

@compute @workgroup_size(WG)
fn gate_step(@builtin(local_invocation_index) lid: u32) {
    let g = glob_base();
    let skip = hyper[g + GLOB_NONFINITE];
    let args = HEAD + LOG;
    let words = 3u * ((arrayLength(&gate) - args) / 6u);
    for (var i = lid; i < words; i = i + WG) { gate[args + i] = select(gate[args + words + i], 0u, skip != 0u); }
    if (lid == 0u) {
        let j = gate[2];
        gate[HEAD + j % LOG] = skip;
        gate[2] = j + 1u;
        gate[1] = gate[1] + select(1u, 0u, skip != 0u);
        gate[0] = skip;
        if (skip != 0u) {
            hyper[g + GLOB_TOTAL_NORM] = 0x7fc00000u;
            if (hyper[g + GLOB_DEVICE_SCALE] != 0u) { loss_scale.found = 1u; }
        }
    }
}
