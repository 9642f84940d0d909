// Top-k gradient compression with error feedback (rlx_gpu/compression.py; the spec: rlx_gpu/reference/topk.py).
// Per tensor, the k entries of largest |acc| (acc = residual + grad, or grad without error feedback), ranked by the
// bits of |acc| as u32 (NaN > inf > finite), ties to the lowest index, written in increasing index order.
// Radix select over the 31 bits of |acc|: three passes of an 11-, 11- and 9-bit digit (hist + pick), then per
// block the count of entries above / equal to the threshold (count), per tensor the blocks' output offsets (scan),
// and the compaction (compact), which also leaves the residual (acc with the sent entries zeroed).
// blocks: a Layout's Block rows (rlx_gpu/runtime/layout.py: tensor, first vec4 in the chunk, end element, block),
// BLOCK = 4096 elements = 256 threads x 4 vec4. sel: a TensorSel per tensor (the threshold's bits found so far: after
// the three passes, the threshold; the equal entries still needed; k; the tensor's flat offset; its output base; its
// first block; its block count). hist: 2048 bins per tensor, then a flag word (set when acc holds inf/NaN). cnt: a
// BlockCount per block (the entries above and equal to the threshold; the scan makes them the block's output offset
// and the equal entries before it). outp: K indices, then K value bits. (The structs: compression.py.)
// prm: a TopkParams (declared in rlx_gpu/addons/distributed/compression.py; the runtime appends its struct): the
// radix pass, the blocks in this dispatch, K, the tensors, inv_scale.

override EF: bool = true;

@group(0) @binding(0) var<storage, read_write> res: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> grad: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> blocks: array<Block>;
@group(0) @binding(3) var<storage, read_write> hist: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> sel: array<TensorSel>;
@group(0) @binding(5) var<storage, read_write> cnt: array<BlockCount>;
@group(0) @binding(6) var<storage, read_write> outp: array<u32>;
@group(0) @binding(7) var<storage, read> prm: TopkParams;

const BLOCK: u32 = 4096u;
const BINS: u32 = 2048u;
const WG: u32 = 256u;

var<workgroup> wh: array<atomic<u32>, 2048>;
var<workgroup> scan_a: array<u32, 256>;
var<workgroup> wnb: u32;
var<workgroup> total: u32;

// acc = residual + grad * inv_scale (prm.inv_scale: a loss scale's inverse, 1.0 without one: x * 1.0 is x)
fn acc4(v: u32) -> vec4<f32> {
    let g = grad[v] * prm.inv_scale;
    if (EF) { return res[v] + g; }
    return g;
}

fn abits(x: vec4<f32>) -> vec4<u32> { return bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu); }

fn shift_of(pass_: u32) -> u32 { return select(select(0u, 9u, pass_ == 1u), 20u, pass_ == 0u); }
fn hi_of(pass_: u32) -> u32 { return select(select(9u, 20u, pass_ == 1u), 31u, pass_ == 0u); }

fn block_id(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return wid.x + wid.y * nwg.x; }

// Histogram of the current digit of |acc| over the entries whose higher digits equal the prefix found so far.
@compute @workgroup_size(256)
fn topk_hist(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let b = block_id(wid, nwg);
    let live = b < prm.blocks;
    for (var j = 0u; j < 8u; j++) { atomicStore(&wh[lid + WG * j], 0u); }
    workgroupBarrier();
    let blk = blocks[select(0u, b, live)];
    let t = blk.tensor;
    let p = prm.radix_pass;
    let sh = shift_of(p);
    let hi = hi_of(p);
    let mask = (1u << (hi - sh)) - 1u;
    let prefix = sel[t].prefix >> hi;
    var bad = false;
    if (live) {
        for (var j = 0u; j < 4u; j++) {
            let v = blk.first + lid + WG * j;
            if (4u * v >= blk.end) { break; }
            let x = acc4(v);
            let a = abits(x);
            for (var c = 0u; c < 4u; c++) {
                if (4u * v + c >= blk.end) { break; }
                bad = bad || a[c] >= 0x7f800000u;
                if ((a[c] >> hi) == prefix) {
                    atomicAdd(&wh[(a[c] >> sh) & mask], 1u);
                }
            }
        }
    }
    if (bad && p == 0u) { atomicOr(&hist[BINS * prm.tensors], 1u); }
    workgroupBarrier();
    if (live) {
        for (var j = 0u; j < 8u; j++) {
            let c = atomicLoad(&wh[lid + WG * j]);
            if (c != 0u) { atomicAdd(&hist[BINS * t + lid + WG * j], c); }
        }
    }
}

// One workgroup per tensor: the bin holding the entry ranked `need`, from the top; the prefix grows by that digit
// and `need` becomes its rank within the bin. The tensor's bins are cleared for the next pass.
@compute @workgroup_size(256)
fn topk_pick(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let t = block_id(wid, nwg);
    let live = t < prm.tensors;
    let tt = select(0u, t, live);
    var s = 0u;
    for (var j = 0u; j < 8u; j++) { s += atomicLoad(&hist[BINS * tt + 8u * lid + j]); }
    scan_a[lid] = s;
    workgroupBarrier();
    if (live && lid == 0u) {
        let sh = shift_of(prm.radix_pass);
        let need = sel[t].need;
        var above = 0u;
        var bin = 0u;
        for (var q = 0u; q < WG; q++) {
            let th = WG - 1u - q;
            if (above + scan_a[th] >= need) {
                for (var r = 0u; r < 8u; r++) {
                    let bb = 8u * th + 7u - r;
                    let c = atomicLoad(&hist[BINS * t + bb]);
                    if (above + c >= need) { bin = bb; break; }
                    above += c;
                }
                break;
            }
            above += scan_a[th];
        }
        sel[t].prefix = sel[t].prefix | (bin << sh);
        sel[t].need = need - above;
    }
    workgroupBarrier();
    if (live) {
        for (var j = 0u; j < 8u; j++) { atomicStore(&hist[BINS * t + 8u * lid + j], 0u); }
    }
}

// Exclusive prefix sum over the workgroup of `v` in scan_a (every thread calls it; returns this thread's part and
// leaves the total in `total`).
fn wg_scan(v: u32, lid: u32) -> u32 {
    scan_a[lid] = v;
    workgroupBarrier();
    for (var d = 1u; d < WG; d = d * 2u) {
        let o = select(0u, scan_a[max(lid, d) - d], lid >= d);
        workgroupBarrier();
        scan_a[lid] += o;
        workgroupBarrier();
    }
    let incl = scan_a[lid];
    if (lid == WG - 1u) { total = incl; }
    workgroupBarrier();
    return incl - v;
}

// Per block: how many entries lie above the threshold, and how many equal it.
@compute @workgroup_size(256)
fn topk_count(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let b = block_id(wid, nwg);
    let live = b < prm.blocks;
    let blk = blocks[select(0u, b, live)];
    let thr = sel[blk.tensor].prefix;
    var gt = 0u;
    var eq = 0u;
    if (live) {
        for (var j = 0u; j < 4u; j++) {
            let v = blk.first + lid + WG * j;
            if (4u * v >= blk.end) { break; }
            let a = abits(acc4(v));
            for (var c = 0u; c < 4u; c++) {
                if (4u * v + c >= blk.end) { break; }
                gt += select(0u, 1u, a[c] > thr);
                eq += select(0u, 1u, a[c] == thr);
            }
        }
    }
    _ = wg_scan(gt, lid);
    let g = total;
    _ = wg_scan(eq, lid);
    if (live && lid == 0u) {
        cnt[blk.block].above = g;
        cnt[blk.block].equal = total;
    }
}

// One workgroup per tensor, over its blocks in order: each block's output offset and the equal entries before it.
@compute @workgroup_size(256)
fn topk_scan(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let t = block_id(wid, nwg);
    let live = t < prm.tensors;
    let tt = select(0u, t, live);
    let need = sel[tt].need;
    let first = sel[tt].first_block;
    if (lid == 0u) { wnb = select(0u, sel[tt].nblocks, live); }
    let nb = workgroupUniformLoad(&wnb);  // (read_write storage is not uniform for the barriers below)
    var out = sel[tt].out_base;
    var eqb = 0u;
    for (var base = 0u; base < nb; base += WG) {
        let b = first + base + lid;
        let mine = base + lid < nb;
        let gt = select(0u, cnt[b].above, mine);
        let eq = select(0u, cnt[b].equal, mine);
        let eq_before = eqb + wg_scan(eq, lid);
        let eq_total = total;
        let take = min(eq, select(0u, need - eq_before, need > eq_before));
        let off = out + wg_scan(gt + take, lid);
        let taken = total;
        if (mine) {
            cnt[b].above = off;
            cnt[b].equal = eq_before;
        }
        out += taken;
        eqb += eq_total;
    }
}

// Per block, 16 consecutive entries a thread: the entries above the threshold and the first `need` equal ones (in
// index order) are written as (flat index, value); with error feedback the residual becomes acc, sent entries 0.
@compute @workgroup_size(256)
fn topk_compact(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let b = block_id(wid, nwg);
    let live = b < prm.blocks;
    let blk = blocks[select(0u, b, live)];
    let t = blk.tensor;
    let thr = sel[t].prefix;
    let need = sel[t].need;
    let K = prm.K;
    var xs: array<vec4<f32>, 4>;
    var eq = 0u;
    var gt = 0u;
    for (var j = 0u; j < 4u; j++) {
        let v = blk.first + 4u * lid + j;
        var x = vec4<f32>(0.0);
        if (live && 4u * v < blk.end) { x = acc4(v); }
        xs[j] = x;
        let a = abits(x);
        for (var c = 0u; c < 4u; c++) {
            let inside = live && 4u * v + c < blk.end;
            gt += select(0u, 1u, inside && a[c] > thr);
            eq += select(0u, 1u, inside && a[c] == thr);
        }
    }
    var eq_rank = cnt[blk.block].equal + wg_scan(eq, lid);
    // (entries taken: all above, and equal ones while their rank among the tensor's equal ones is below need)
    let eq_take = min(eq, select(0u, need - eq_rank, need > eq_rank));
    var pos = cnt[blk.block].above + wg_scan(gt + eq_take, lid);
    let flat0 = sel[t].flat + (blk.block - sel[t].first_block) * BLOCK;  // (the block's first entry, flat)
    for (var j = 0u; j < 4u; j++) {
        let v = blk.first + 4u * lid + j;
        if (!live || 4u * v >= blk.end) { break; }
        var x = xs[j];
        let a = abits(x);
        for (var c = 0u; c < 4u; c++) {
            if (4u * v + c >= blk.end) { break; }
            var take = a[c] > thr;
            if (a[c] == thr) {
                take = eq_rank < need;
                eq_rank += 1u;
            }
            if (take) {
                outp[pos] = flat0 + 4u * v + c - 4u * blk.first;
                outp[K + pos] = bitcast<u32>(x[c]);
                pos += 1u;
                x[c] = 0.0;
            }
        }
        if (EF) { res[v] = x; }
    }
}
