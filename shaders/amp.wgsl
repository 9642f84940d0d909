// GradScaler's state on the device, so that neither step() nor update() waits for the GPU (ls: struct LossScale,
// declared in rlx_gpu/addons/amp.py): scale, growth tracker, found (inf/NaN since the last update, set by
// shaders/gate.wgsl), growth and backoff factors, growth interval. The first three words are the device loss-scale
// protocol an optimizer's step reads (rlx_gpu/engine/steps.py: word 0 the scale, word 2 the found flag).
// update_scale: torch's _amp_update_scale_: on found, scale *= backoff and tracker = 0; else tracker += 1 and at
// the interval scale *= growth (kept only if finite) and tracker = 0. Then found = 0.
@group(0) @binding(0) var<storage, read_write> ls: LossScale;

@compute @workgroup_size(1)
fn update_scale() {
    if (ls.found != 0u) {
        ls.scale = ls.scale * ls.backoff;
        ls.tracker = 0u;
    } else {
        let grown = ls.tracker + 1u;
        if (grown == ls.interval) {
            let s = ls.scale * ls.growth;
            if ((bitcast<u32>(s) & 0x7f800000u) != 0x7f800000u) { ls.scale = s; }
            ls.tracker = 0u;
        } else {
            ls.tracker = grown;
        }
    }
    ls.found = 0u;
}
