// GradScaler's state on the device, so that neither step() nor update() waits for the GPU:
//   scaler[0] scale (f32), [1] growth tracker, [2] found inf/NaN since the last update (set by shaders/gate.wgsl),
//   [3] growth factor (f32), [4] backoff factor (f32), [5] growth interval.
// update_scale: torch's _amp_update_scale_: on found, scale *= backoff and tracker = 0; else tracker += 1 and at
// the interval scale *= growth (kept only if finite) and tracker = 0. Then found = 0.
@group(0) @binding(0) var<storage, read_write> scaler: array<u32>;

@compute @workgroup_size(1)
fn update_scale() {
    let scale = bitcast<f32>(scaler[0]);
    if (scaler[2] != 0u) {
        scaler[0] = bitcast<u32>(scale * bitcast<f32>(scaler[4]));
        scaler[1] = 0u;
    } else {
        let grown = scaler[1] + 1u;
        if (grown == scaler[5]) {
            let s = bitcast<u32>(scale * bitcast<f32>(scaler[3]));
            if ((s & 0x7f800000u) != 0x7f800000u) { scaler[0] = s; }
            scaler[1] = 0u;
        } else {
            scaler[1] = grown;
        }
    }
    scaler[2] = 0u;
}
