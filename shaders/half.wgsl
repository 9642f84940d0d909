// The float16 path of the matrix optimizers' products (rlx_gpu/linalg/half.py, matmul_dtype="float16"): float32
// matrices into float16 scaled per matrix by a power of two (so that the largest |entry| lies in [1, 2): exact, and
// sums of products stay far from f16's range), the scales' inverses kept on the device and applied to the float32
// results after the GEMMs. Parameters by name (hp: HalfParams).
//   half_reset    mx[z] = 0                        half_absmax  mx[z] = max |src matrix z| (as bits; a workgroup's
//                                                  maximum first, then one atomicMax)
//   half_to       dst = f16(src * s_z), inv[z] = 1 / s_z (s_z = 1 for 0, inf, NaN maxima); half_copy: dst = f16(src)
//   half_from     c = f32(src16)                   (the tiled f16 GEMM's results into float32)
//   unscale       c *= the product of inv[k + z] over the given k's;  sub_scaled: c -= that product times src

enable f16;

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f16>;
@group(0) @binding(2) var<storage, read_write> mx: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> inv: array<f32>;
@group(0) @binding(4) var<storage, read> hp: HalfParams;
@group(0) @binding(5) var<storage, read_write> c32: array<f32>;
@group(0) @binding(6) var<storage, read> s16: array<f16>;

// #include "matrix_common.wgsl"

fn at(i: u32) -> vec3<u32> {  // (matrix, row, column) of element i
    let per = hp.rows * hp.cols;
    return vec3<u32>(i / per, (i % per) / hp.cols, i % hp.cols);
}
// the index of element (matrix, row, column) in the source / the destination
fn s_at(p: vec3<u32>) -> u32 { return hp.s_off + p.x * hp.s_bs + p.y * hp.s_ld + p.z; }
fn d_at(p: vec3<u32>) -> u32 { return hp.d_off + p.x * hp.d_bs + p.y * hp.d_ld + p.z; }

// The product of inv[k + z] over the first nk of k1, k2, k3
fn inv_product(z: u32, nk: u32) -> f32 {
    var f = 1.0;
    if (nk > 0u) { f = f * inv[hp.k1 + z]; }
    if (nk > 1u) { f = f * inv[hp.k2 + z]; }
    if (nk > 2u) { f = f * inv[hp.k3 + z]; }
    return f;
}

@compute @workgroup_size(256)
fn half_reset(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < hp.batch) { atomicStore(&mx[hp.m_off + i], 0u); }
}

// workgroup w: matrix w / groups, elements (w % groups) * 1024 + lid + 256 j, j < 4
@compute @workgroup_size(256)
fn half_absmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    let live = w < hp.groups * hp.batch;
    let z = select(0u, w / hp.groups, live);
    let per = hp.rows * hp.cols;
    var m = 0.0;
    for (var j = 0u; j < 4u; j++) {
        let e = (w % hp.groups) * 1024u + j * 256u + lid;
        if (live && e < per) {
            let v = abs(src[hp.s_off + z * hp.s_bs + (e / hp.cols) * hp.s_ld + e % hp.cols]);
            m = select(max(m, v), v, v != v);  // (NaN wins: its bits are past +inf's)
        }
    }
    let t = wg_max(lid, m);
    if (live && lid == 0u) { atomicMax(&mx[hp.m_off + z], bitcast<u32>(t)); }
}

fn scale_of(z: u32) -> f32 {
    let e = (atomicLoad(&mx[hp.m_off + z]) >> 23u) & 0xffu;
    if (e == 0u || e == 255u) { return 1.0; }
    return bitcast<f32>((254u - clamp(e, 1u, 253u)) << 23u);
}

@compute @workgroup_size(256)
fn half_to(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= hp.rows * hp.cols * hp.batch) { return; }
    let p = at(i);
    let s = scale_of(p.x);
    dst[d_at(p)] = f16(src[s_at(p)] * s);
    if (p.y == 0u && p.z == 0u) { inv[hp.m_off + p.x] = 1.0 / s; }
}

@compute @workgroup_size(256)
fn half_copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= hp.rows * hp.cols * hp.batch) { return; }
    dst[d_at(at(i))] = f16(src[s_at(at(i))]);
}

@compute @workgroup_size(256)
fn half_from(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= hp.rows * hp.cols * hp.batch) { return; }
    let p = at(i);
    c32[d_at(p)] = f32(s16[s_at(p)]);
}

@compute @workgroup_size(256)
fn unscale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= hp.rows * hp.cols * hp.batch) { return; }
    let p = at(i);
    let o = d_at(p);
    c32[o] = c32[o] * inv_product(p.x, hp.nk);
}

@compute @workgroup_size(256)
fn sub_scaled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i >= hp.rows * hp.cols * hp.batch) { return; }
    let p = at(i);
    let o = d_at(p);
    c32[o] = c32[o] - inv_product(p.x, min(hp.nk, 2u)) * src[s_at(p)];
}
