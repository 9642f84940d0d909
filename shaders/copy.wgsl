// A plain device copy, dst = src, used by `rlx-gpu bench` to measure the copy bandwidth each optimizer is
// compared against. Each thread copies EPT vec4s, strided by WG (as the optimizer kernels load).
override WG: u32 = 256u;
override EPT: u32 = 4u;

@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let base = (wid.x + wid.y * nwg.x) * WG * EPT + lid;
    let n = arrayLength(&src);
    for (var k = 0u; k < EPT; k++) {
        let i = base + k * WG;
        if (i < n) { dst[i] = src[i]; }
    }
}
