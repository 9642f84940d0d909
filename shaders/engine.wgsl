// The engine's helpers, in every generated kernel module after the record prelude (rlx_gpu/engine/codegen.py),
// which declares `hyper` (the records: one per tensor, then the global record) and `blocks` (this chunk's block
// table: an array<Block>, one per block: its tensor, its first vec4 index in the chunk, the end element of its
// tensor in the chunk (exclusive) and its global block index; a block never crosses a tensor; the struct is
// generated from rlx_gpu/runtime/layout.py's BLOCK_ROW: 16 bytes, loaded whole).
//   // #include "engine.wgsl"

override WG: u32 = 256u;
override EPT: u32 = 2u;

fn ntensors() -> u32 { return arrayLength(&hyper) / REC - 1u; }
fn glob_base() -> u32 { return ntensors() * REC; }
fn has(r: Rec, flag: u32) -> bool { return (r.flags & flag) != 0u; }
// The multiplier of every gradient this step (1/loss scale, times the clip factor once a clip has run).
fn grad_mul() -> f32 { return bitcast<f32>(hyper[glob_base() + GLOB_GRAD_MUL]); }
// A per-tensor value a per-tensor pass computes on the device for the passes after it (a trust ratio, a norm).
fn set_tensor_scalar(t: u32, v: f32) { hyper[t * REC + REC_TENSOR_SCALAR] = bitcast<u32>(v); }

// The block this workgroup owns (the grid may be 2-D past 65535 workgroups); every word NONE past the end.
const NONE: u32 = 0xffffffffu;
fn block_of(wid: vec3<u32>, nwg: vec3<u32>) -> Block {
    let b = wid.x + wid.y * nwg.x;
    if (b >= arrayLength(&blocks)) { return Block(NONE, NONE, NONE, NONE); }
    return blocks[b];  // (one 16-byte element: array<Block>'s stride is 16 bytes, its bindings 256-byte aligned)
}
// block_of, but NONE also when the block's tensor has no grad this step (nothing to do).
fn active_block(wid: vec3<u32>, nwg: vec3<u32>) -> Block {
    let blk = block_of(wid, nwg);
    if (blk.tensor == NONE || (hyper[blk.tensor * REC + REC_FLAGS] & ACTIVE) == 0u) {
        return Block(NONE, NONE, NONE, NONE);
    }
    return blk;
}
// Lanes of vec4 `i` that lie past `end` (padding after a tensor): true = keep the old value.
fn tail(i: u32, end: u32) -> vec4<bool> {
    return vec4<u32>(4u * i) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(end);
}
// Index within its tensor of lane 0 of vec4 `i` in block `blk` (blocks of a tensor are numbered consecutively).
fn elem0(blk: Block, r: Rec, i: u32) -> u32 {
    return (blk.block - r.first_block) * (WG * EPT * 4u) + 4u * (i - blk.first);
}

// torch.lerp with a scalar weight (torch switches formula at w = 0.5).
fn lerp4(a: vec4<f32>, b: vec4<f32>, w: f32) -> vec4<f32> {
    if (w < 0.5) { return a + w * (b - a); }
    return b - (b - a) * (1.0 - w);
}
fn lerp1(a: f32, b: f32, w: f32) -> f32 {
    if (w < 0.5) { return a + w * (b - a); }
    return b - (b - a) * (1.0 - w);
}

// Tree sums of red/red2[0..WG) into element 0 (WG is a power of two); only entry points that use them get the
// workgroup memory.
var<workgroup> red: array<f32, WG>;
var<workgroup> red2: array<vec2<f32>, WG>;
fn reduce(lid: u32) {
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    }
    workgroupBarrier();
}
fn reduce2(lid: u32) {
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red2[lid] = red2[lid] + red2[lid + s]; }
    }
    workgroupBarrier();
}
