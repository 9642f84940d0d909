// Row-sparse updates (rlx_gpu/engine/sparse.py): one thread per (touched row, column) of one piece of a tensor;
// elements outside the piece (a tensor split over chunks) are left to that piece's dispatch. torch's semantics:
//   sparse_adam     torch.optim.SparseAdam (coalesced grad): m += (g - m)*(1-b1); v += (g*g - v)*(1-b2);
//                   p += -step_size * m / (sqrt(v) + eps), step_size = lr * sqrt(1-b2^t) / (1-b1^t)
//   sparse_adagrad  torch.optim.Adagrad's sparse branch (coalesced): sum += g*g; p = fma(-clr, g / (sqrt(sum) + eps), p)
//   sparse_sgd      torch.optim.SGD without momentum: p = fma(-lr, g_k, p) for each entry k of the row, in order
// sp_meta: a SparseMeta (declared in rlx_gpu/engine/sparse.py, whose struct the runtime appends to this text): the
// piece (L row length, rows, off: the piece's offset in its chunk, toff: its first element in the tensor, ln: its
// length), the step's scalars (negate for maximize, rate: the signed step size, eps, omb1 = 1-b1, omb2 = 1-b2), then
// idx: the touched rows, then (sparse_sgd) each row's first entry and entry count.

@group(0) @binding(0) var<storage, read_write> param: array<f32>;
@group(0) @binding(1) var<storage, read_write> st_a: array<f32>;
@group(0) @binding(2) var<storage, read_write> st_b: array<f32>;
@group(0) @binding(3) var<storage, read> sp_meta: SparseMeta;
@group(0) @binding(4) var<storage, read> vals: array<f32>;

const NONE: u32 = 0xffffffffu;

// The element of the chunk thread `gid` updates (NONE: none), and its (row slot, column).
fn slot_of(gid: u32) -> vec3<u32> {
    let L = sp_meta.L;
    if (L == 0u || gid >= sp_meta.rows * L) { return vec3<u32>(NONE); }
    let k = gid / L;
    let col = gid % L;
    let e = sp_meta.idx[k] * L + col;
    if (e < sp_meta.toff || e - sp_meta.toff >= sp_meta.ln) { return vec3<u32>(NONE); }
    return vec3<u32>(sp_meta.off + (e - sp_meta.toff), k, col);
}

fn grad(gid: u32) -> f32 { return select(vals[gid], -vals[gid], sp_meta.negate != 0u); }

// This thread's (element of the chunk, row slot, column, value index); x = NONE: nothing to do.
fn start(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> vec4<u32> {
    let gid = (wid.x + wid.y * nwg.x) * 256u + lid;
    return vec4<u32>(slot_of(gid), gid);
}

// SparseAdam's update of (up to) four elements, lane by lane: new m, v and p.
struct AdamOut { m: vec4<f32>, v: vec4<f32>, p: vec4<f32> }
fn adam4(g: vec4<f32>, m0: vec4<f32>, v0: vec4<f32>, p0: vec4<f32>) -> AdamOut {
    let m1 = m0 + (g - m0) * sp_meta.omb1;
    let v1 = v0 + (g * g - v0) * sp_meta.omb2;
    return AdamOut(m1, v1, p0 + sp_meta.rate * (m1 / (sqrt(v1) + sp_meta.eps)));
}

@compute @workgroup_size(256)
fn sparse_adam(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let t = start(wid, nwg, lid);
    if (t.x == NONE) { return; }
    let j = t.x;
    let o = adam4(vec4<f32>(grad(t.w)), vec4<f32>(st_a[j]), vec4<f32>(st_b[j]), vec4<f32>(param[j]));
    st_a[j] = o.m.x;
    st_b[j] = o.v.x;
    param[j] = o.p.x;
}

@compute @workgroup_size(256)
fn sparse_adagrad(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let t = start(wid, nwg, lid);
    if (t.x == NONE) { return; }
    let j = t.x;
    let g = grad(t.w);
    let s = st_a[j] + g * g;
    st_a[j] = s;
    param[j] = fma(sp_meta.rate, g / (sqrt(s) + sp_meta.eps), param[j]);
}

@compute @workgroup_size(256)
fn sparse_sgd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let t = start(wid, nwg, lid);
    if (t.x == NONE) { return; }
    let L = sp_meta.L;
    let n = sp_meta.rows;
    let first = sp_meta.idx[n + t.y];
    let count = sp_meta.idx[2u * n + t.y];
    var p = param[t.x];
    for (var q = 0u; q < count; q++) {
        p = fma(sp_meta.rate, grad((first + q) * L + t.z), p);
    }
    param[t.x] = p;
}

// sparse_adam over four columns per thread, for rows whose length is a multiple of 4 (embedding tables): adam4 on
// all four lanes, with a quarter of the index work. (Its bindings alias sparse_adam's;
// WGSL allows that across entry points.)
@group(0) @binding(0) var<storage, read_write> param4: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> st_a4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> st_b4: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> vals4: array<vec4<f32>>;

@compute @workgroup_size(256)
fn sparse_adam4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let gid = (wid.x + wid.y * nwg.x) * 256u + lid;  // (a vec4 of the values: row slot, column / 4)
    let L4 = sp_meta.L / 4u;
    if (L4 == 0u || gid >= sp_meta.rows * L4) { return; }
    let e = sp_meta.idx[gid / L4] * sp_meta.L + 4u * (gid % L4);
    if (e < sp_meta.toff || e - sp_meta.toff >= sp_meta.ln) { return; }
    let j = (sp_meta.off + (e - sp_meta.toff)) / 4u;
    let o = adam4(select(vals4[gid], -vals4[gid], sp_meta.negate != 0u), st_a4[j], st_b4[j], param4[j]);
    st_a4[j] = o.m;
    st_b4[j] = o.v;
    param4[j] = o.p;
}
