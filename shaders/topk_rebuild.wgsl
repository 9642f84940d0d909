// Rebuilding the mean of N ranks' top-k lists on the device (rlx_gpu/compression.py; spec:
// rlx_gpu/reference/topk.py average_lists): one scatter dispatch per rank in rank order (entries within one list
// are distinct, so a thread per entry adds without races), then the finish pass (times 1/N, sums of squares).

const WG: u32 = 256u;

fn block_id(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return wid.x + wid.y * nwg.x; }

// The rebuild (scatter): add one rank's (index, value) entries [sprm.lo, sprm.hi) (at sprm.base in `lst`, values
// sprm.K further on; a ScatterParams, declared in rlx_gpu/addons/distributed/compression.py) into `dense`, one
// piece of it per Segment (flat start, size, element offset `at` in dense; sprm.segments of them, sorted by start).
@group(0) @binding(0) var<storage, read_write> dense: array<f32>;
@group(0) @binding(1) var<storage, read> segs: array<Segment>;
@group(0) @binding(2) var<storage, read> lst: array<u32>;
@group(0) @binding(3) var<storage, read> sprm: ScatterParams;

@compute @workgroup_size(256)
fn topk_scatter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let e = sprm.lo + block_id(wid, nwg) * WG + lid;
    if (e >= sprm.hi) { return; }
    let idx = lst[sprm.base + e];
    let val = bitcast<f32>(lst[sprm.base + sprm.K + e]);
    var lo = 0u;
    var hi = sprm.segments;  // (segments [lo, hi) may hold idx: the last one starting at or below it)
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (segs[mid].start <= idx) { lo = mid; } else { hi = mid; }
    }
    let seg = segs[lo];
    if (idx >= seg.start && idx - seg.start < seg.size) {
        let d = seg.at + idx - seg.start;
        dense[d] = dense[d] + val;
    }
}

// The mean (times 1/N) of a rebuilt buffer, and per workgroup the sum of squares of the result (partials[fprm.part0 +
// workgroup]; fprm: a FinishParams); inf/NaN show there as a non-finite sum.
@group(0) @binding(4) var<storage, read_write> mean: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<storage, read> fprm: FinishParams;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn topk_finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let w = block_id(wid, nwg);
    let inv = fprm.inv_n;
    var s = 0.0;
    for (var j = 0u; j < 4u; j++) {
        let v = w * 1024u + lid + WG * j;
        if (v < fprm.nvec) {
            let x = mean[v] * inv;
            mean[v] = x;
            s += dot(x, x);
        }
    }
    red[lid] = s;
    workgroupBarrier();
    for (var d = WG / 2u; d > 0u; d = d / 2u) {
        if (lid < d) { red[lid] += red[lid + d]; }
        workgroupBarrier();
    }
    if (lid == 0u && w * 1024u < fprm.nvec) { partials[fprm.part0 + w] = red[0]; }
}
