// What the matrix shaders share (included by muon, soap, kron, stiefel, cholqr, gemm and gemm16 .wgsl): the flat
// index of a 2-D grid of 256-thread workgroups, torch.lerp, and workgroup sums and maxima over 256 threads.

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 { return (wid.x + wid.y * nwg.x) * 256u + lid; }

// torch.lerp with a scalar weight (torch switches formula at w = 0.5)
fn lerp1(a: f32, b: f32, w: f32) -> f32 {
    if (w < 0.5) { return a + w * (b - a); }
    return b - (b - a) * (1.0 - w);
}

var<workgroup> red: array<f32, 256>;

// The sum (wg_sum) or maximum (wg_max) of v over the workgroup's 256 threads, in a tree, for every thread (call it
// in uniform control flow; it may follow another reduction: it begins with a barrier)
fn wg_sum(lid: u32, v: f32) -> f32 {
    workgroupBarrier();
    red[lid] = v;
    for (var w = 128u; w > 0u; w = w / 2u) {
        workgroupBarrier();
        if (lid < w) { red[lid] = red[lid] + red[lid + w]; }
    }
    workgroupBarrier();
    return red[0];
}

fn wg_max(lid: u32, v: f32) -> f32 {
    workgroupBarrier();
    red[lid] = v;
    for (var w = 128u; w > 0u; w = w / 2u) {
        workgroupBarrier();
        if (lid < w) { red[lid] = max(red[lid], red[lid + w]); }
    }
    workgroupBarrier();
    return red[0];
}
