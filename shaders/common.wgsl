// Shared by every optimizer kernel; a shader pulls it in with the line  // #include "common.wgsl"
//
// Binding 0, `hyper`: the scalar buffer, written by the host before each step. One record of REC
// 32-bit words per tensor, at word t*REC:
//   word 0       flags: bit 0 active (the tensor has a grad this step), bit 1 maximize, bits 2+ per family
//   words 1..13  f32 scalars, laid out per family (see the comment at the top of each shader)
//   word 14      u32 first global block of the tensor;  word 15  u32 number of blocks
// After the n tensor records, one global record (written by the host, and by shaders/clip.wgsl when the
// gradient norm is clipped inside the step): word 0 f32 multiplier of every grad (1, or the clip factor).
// Binding 1, `blocks`: one vec4<u32> per block of this chunk: (tensor, first vec4 index in the chunk,
// end element in the chunk (exclusive), global block index). A block never crosses a tensor.
// Bindings 2 and 3, `param` and `grad`: this chunk of the params and grads arenas (vec4 views).
// Each thread handles EPT vec4s of its block, strided by WG so that loads coalesce.

// #include "ieee.wgsl"

const REC: u32 = 16u;
const ACTIVE: u32 = 1u;
const MAXIMIZE: u32 = 2u;

override WG: u32 = 256u;
override EPT: u32 = 2u;

@group(0) @binding(0) var<storage, read> hyper: array<u32>;
@group(0) @binding(1) var<storage, read> blocks: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> param: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> grad: array<vec4<f32>>;

fn hf(t: u32, k: u32) -> f32 { return bitcast<f32>(hyper[t * REC + k]); }
fn ntensors() -> u32 { return arrayLength(&hyper) / REC - 1u; }
// The multiplier of every gradient this step (the global-norm clip factor, else exactly 1).
fn gscale() -> f32 { return bitcast<f32>(hyper[ntensors() * REC]); }
fn hu(t: u32, k: u32) -> u32 { return hyper[t * REC + k]; }

// The block this workgroup owns (the grid may be 2-D past 65535 workgroups); x = NONE past the end.
const NONE: u32 = 0xffffffffu;
fn block_of(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
    let b = wid.x + wid.y * nwg.x;
    if (b >= arrayLength(&blocks)) { return vec4<u32>(NONE); }
    return blocks[b];
}

// block_of, but x = NONE also when the block's tensor has no grad this step (nothing to do).
fn active_block(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
    let blk = block_of(wid, nwg);
    if (blk.x == NONE || (hu(blk.x, 0u) & ACTIVE) == 0u) { return vec4<u32>(NONE); }
    return blk;
}

// This step's grads at vec4 `i` of a tensor with flags `f`: times the global multiplier, negated to maximize.
fn grad_of(i: u32, f: u32) -> vec4<f32> {
    let g = grad[i] * gscale();
    return select(g, -g, (f & MAXIMIZE) != 0u);
}

// Lanes of vec4 `i` that lie past `end` (padding after a tensor): true = keep the old value.
fn tail(i: u32, end: u32) -> vec4<bool> {
    return vec4<u32>(4u * i) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(end);
}

// torch.lerp with a scalar weight (torch switches formula at w = 0.5).
fn lerp4(a: vec4<f32>, b: vec4<f32>, w: f32) -> vec4<f32> {
    if (w < 0.5) { return a + w * (b - a); }
    return b - (b - a) * (1.0 - w);
}

// Tree sum of red[0..WG) into red[0], for the per-block and per-tensor reductions (WG is a power of two).
// Only entry points that use it get the workgroup memory.
var<workgroup> red: array<f32, WG>;

fn reduce(lid: u32) {
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    }
    workgroupBarrier();
}
