// The optimizers' `qat=` export (rlx_gpu/engine/qat.py), part of the module of a bucket holding tensors with a
// quantized copy. The update pass is the driver's variant that walks `qat_runs` (in place of the chunk's block
// table, one entry per engine block: that block, or for a *fused* tensor a run of whole channels, its rows) and
// notes each updated weight's |w| in its channel's amax (a running max per thread, workgroup atomics, then one
// global atomicMax per channel and workgroup). For a fused tensor the workgroup has seen whole channels: after a
// barrier it makes their scales, torch.ao's symmetric max(amax / ((qmax - qmin) / 2), eps), and writes the codes
// (int8: four per word, int4: eight, low bits first) and, if asked, the fake-quantized values (float32 or
// bfloat16) itself (qat_end reads the run back; qat_end_kept, Optimizer.QAT_KEEP, from the vec4s each thread
// kept). For the other tensors qat_rescale turns the global amax into scales (and their exact reciprocals) and
// qat_encode (or qat_encode_cached, Optimizer.QAT_ENCODE) writes the codes and values, after the update in the
// same submission (the second pass). qat_amax does the first part without an update (a copy of weights written from the host; then every
// tensor takes the second pass). The twin is rlx_gpu/reference/qat.py's export_copy. One binding holds it all
// (WebGPU's default limit is 8 storage buffers per stage, and AdamW's update already binds 7):
//   qat words (declared by name in rlx_gpu/engine/qat.py, QAT_HEAD and QAT_ENTRY; read here through the constants
//   QH_<field>, QE_<field>, QAT_HEAD_WORDS and QAT_ENTRY_WORDS made from them): the head's tensors, exported (K),
//   ent (ENT), amax (AMAX), inv (INV), eps, refresh (1 = every exported tensor through the second pass, a refresh
//   from the host; else only those with a grad this step that are not fused), scale (SCALE); then, for tensor t,
//   k + 1 for its entry k (0: none); entry k at ENT + QAT_ENTRY_WORDS k: tensor, flags (bit 0 per channel, bit 1
//   fused, bits 8..15 code bits, bits 16..17 values: 1 float32, 2 bfloat16), row (the row length L), channels,
//   chan (first channel), code (first code word), vals (first values word); AMAX + c: |w| bits of channel c;
//   INV + c: 1/scale of channel c; SCALE + c: the scale of channel c (f32 bits); then the codes and the values.
//   qat_runs[b] for block b of the chunk: a QatRun (declared in rlx_gpu/engine/qatfuse.py, QAT_RUN): tensor (or
//   NONE), first (vec4 in the chunk), end (element in the chunk, exclusive) as a Block's, elem (the run's first
//   element in the tensor).
// #include "qat.wgsl"

@group(0) @binding(N) var<storage, read_write> qat: array<atomic<u32>>;
@group(0) @binding(N) var<storage, read> qat_runs: array<QatRun>;

const QAT_SLOTS: u32 = 64u;  // channels a workgroup keeps (a fused run has at most as many rows)
var<workgroup> qat_wm: array<atomic<u32>, 64>;
var<workgroup> qat_ws: array<f32, 64>;  // a fused run's scales and their reciprocals
var<workgroup> qat_wi: array<f32, 64>;

// (amax, inv, scale: the words of the tensor's first channel in AMAX, INV and SCALE)
struct QatEntry { on: bool, per_channel: bool, fused: bool, bits: u32, values: u32, L: u32, channels: u32,
                  amax: u32, inv: u32, scale: u32, code: u32, vals: u32, eps: f32 }

fn qat_w(i: u32) -> u32 { return atomicLoad(&qat[i]); }
fn qat_put(i: u32, v: u32) { atomicStore(&qat[i], v); }
// Tensor t's entry; `on` false where t has none, or (in a step) no grad. `fused`: exported by the update pass.
fn qat_entry(t: u32, live: bool) -> QatEntry {
    var q: QatEntry;
    let k = select(0u, qat_w(QAT_HEAD_WORDS + t), live && t < qat_w(QH_TENSORS));
    let refresh = qat_w(QH_REFRESH) == 1u;
    q.on = k != 0u && (refresh || has(rec(t), ACTIVE));
    let b = qat_w(QH_ENT) + QAT_ENTRY_WORDS * (max(k, 1u) - 1u);
    let f = qat_w(b + QE_FLAGS);
    q.per_channel = (f & 1u) != 0u;
    q.fused = (f & 2u) != 0u && !refresh;
    q.bits = (f >> 8u) & 255u;
    q.values = (f >> 16u) & 3u;
    q.L = max(qat_w(b + QE_ROW), 1u);
    q.channels = qat_w(b + QE_CHANNELS);
    let chan = qat_w(b + QE_CHAN);
    q.amax = qat_w(QH_AMAX) + chan;
    q.inv = qat_w(QH_INV) + chan;
    q.scale = qat_w(QH_SCALE) + chan;
    q.eps = bitcast<f32>(qat_w(QH_EPS));
    q.code = qat_w(b + QE_CODE);
    q.vals = qat_w(b + QE_VALS);
    return q;
}
fn qat_first_channel(q: QatEntry, e: u32) -> u32 { return select(0u, e / q.L, q.per_channel); }
// A thread's place in its tensor's rows (per tensor: one row, the whole tensor), moved on by a fixed stride
// without a division per vec4: the channel c of its element and the element's offset r in that row.
struct QatPos { c: u32, r: u32, dc: u32, dr: u32 }
fn qat_pos(q: QatEntry, e: u32, stride: u32) -> QatPos { return QatPos(e / q.L, e % q.L, stride / q.L, stride % q.L); }
fn qat_next(q: QatEntry, p: ptr<function, QatPos>) {
    (*p).c += (*p).dc;
    (*p).r += (*p).dr;
    if ((*p).r >= q.L) { (*p).r -= q.L; (*p).c += 1u; }
}
// The channel of lane l of the vec4 at offset `off` after p (only where that vec4 crosses a row end: a division).
fn qat_lane(q: QatEntry, p: QatPos, off: u32, l: u32) -> u32 { return p.c + (p.r + off + l) / q.L; }
// The update pass's run (as active_block: NONE past the end, for none, and for a tensor without a grad).
fn qat_run(wid: vec3<u32>, nwg: vec3<u32>) -> QatRun {
    let b = wid.x + wid.y * nwg.x;
    if (b >= arrayLength(&qat_runs)) { return QatRun(NONE, NONE, NONE, NONE); }
    let blk = qat_runs[b];  // (one 16-byte element, as a Block)
    if (blk.tensor == NONE || (hyper[blk.tensor * REC + REC_FLAGS] & ACTIVE) == 0u) {
        return QatRun(NONE, NONE, NONE, NONE);
    }
    return blk;
}

fn qat_begin(lid: u32) {
    if (lid < QAT_SLOTS) { atomicStore(&qat_wm[lid], 0u); }
    workgroupBarrier();
}
// A thread's running (channel, |w| bits) pair, into the workgroup's slot (or past them, the global amax).
fn qat_flush(q: QatEntry, c0: u32, run: vec2<u32>) {
    if (!q.on || run.y == 0u) { return; }
    if (run.x - c0 < QAT_SLOTS) { atomicMax(&qat_wm[run.x - c0], run.y); }
    else { atomicMax(&qat[q.amax + run.x], run.y); }
}
// The stored weights w of the four elements at p (lanes `keep` are padding), into the running max of their
// channel.
fn qat_note(q: QatEntry, c0: u32, p: QatPos, w: vec4<f32>, keep: vec4<bool>, run: ptr<function, vec2<u32>>) {
    if (!q.on) { return; }
    let m = select(bitcast<vec4<u32>>(w) & vec4<u32>(0x7fffffffu), vec4<u32>(0u), keep);  // (NaN above inf)
    if (p.r + 3u < q.L) {  // (the four lanes in one channel)
        if (p.c != (*run).x) { qat_flush(q, c0, *run); *run = vec2<u32>(p.c, 0u); }
        (*run).y = max((*run).y, max(max(m.x, m.y), max(m.z, m.w)));
        return;
    }
    for (var l = 0u; l < 4u; l++) {
        let cl = qat_lane(q, p, 0u, l);
        if (cl != (*run).x) { qat_flush(q, c0, *run); *run = vec2<u32>(cl, 0u); }
        (*run).y = max((*run).y, m[l]);
    }
}
// After the barrier that follows the last flush: the workgroup's channel maxima into the global amax (the tensors
// of the second pass).
fn qat_publish(q: QatEntry, c0: u32, lid: u32) {
    if (q.on && !q.fused && lid < QAT_SLOTS && c0 + lid < q.channels) {
        let v = atomicLoad(&qat_wm[lid]);
        if (v != 0u) { atomicMax(&qat[q.amax + c0 + lid], v); }
    }
}
fn qat_scale_of(q: QatEntry, amax: f32) -> f32 {
    let qmax = f32((1u << (q.bits - 1u)) - 1u);
    let s0 = fq_div(amax, qmax + 0.5);  // ((qmax - qmin) / 2 = qmax + 0.5)
    return select(select(s0, q.eps, s0 < q.eps), s0, fq_isnan(s0));
}
// After the loop (uniform control flow): the workgroup's channel maxima into the global amax, or for a fused
// tensor its run's scales, codes and values.
fn qat_end(q: QatEntry, c0: u32, blk: QatRun, lid: u32, run: vec2<u32>) {
    qat_words(q, c0, blk, lid, 0u, qat_scales(q, c0, blk, lid, run));
}
// The workgroup's maxima published, and for a fused run its scales (its rows; 0 for another tensor's run), after
// barriers that let every thread read the scales and the run's stored weights.
fn qat_scales(q: QatEntry, c0: u32, blk: QatRun, lid: u32, run: vec2<u32>) -> u32 {
    let rows = qat_scale_rows(q, c0, blk, lid, run);
    storageBarrier();  // (the run's weights, stored by every thread, seen by every thread)
    workgroupBarrier();
    return rows;
}
fn qat_scale_rows(q: QatEntry, c0: u32, blk: QatRun, lid: u32, run: vec2<u32>) -> u32 {
    qat_flush(q, c0, run);
    workgroupBarrier();
    qat_publish(q, c0, lid);
    let rows = select(0u, qat_first_channel(q, blk.elem + (blk.end - 4u * blk.first) - 1u) - c0 + 1u, q.on && q.fused);
    if (lid < rows) {
        let s = qat_scale_of(q, bitcast<f32>(atomicLoad(&qat_wm[lid])));
        qat_ws[lid] = s;
        qat_wi[lid] = fq_div(1.0, s);
        qat_put(q.scale + c0 + lid, bitcast<u32>(s));
    }
    return rows;
}
// A fused run's code words from word j0 on (and their values), its weights read back.
fn qat_words(q: QatEntry, c0: u32, blk: QatRun, lid: u32, j0: u32, rows: u32) {
    if (rows == 0u) { return; }
    let per = select(2u, 1u, q.bits == 8u);  // vec4s per code word
    let nw = (blk.end - 4u * blk.first + 4u * per - 1u) / (4u * per);
    var pos = qat_pos(q, blk.elem + 4u * per * (j0 + lid), 4u * per * WG);
    for (var j = j0 + lid; j < nw; j = j + WG) {
        let i0 = blk.first + per * j;
        let e0 = blk.elem + 4u * per * j;
        let c = select(0u, pos.c - c0, q.per_channel);  // (a fused run's code words lie in one channel each)
        qat_next(q, &pos);
        var word = 0u;
        for (var h = 0u; h < per; h++) {
            let i = i0 + h;
            if (4u * i < blk.end) {
                let e = e0 + 4u * h;
                let code = qat_code4(q, qat_load(i), tail(i, blk.end), vec4<f32>(qat_wi[c]));
                word = word | (qat_pack(code, q.bits) << (16u * h));
                if (q.values != 0u) { qat_store_values(q, e, code, vec4<f32>(qat_ws[c])); }
            }
        }
        qat_put(q.code + e0 * q.bits / 32u, word);
    }
}
// qat_end's variant for Optimizer.QAT_KEEP: each thread kept the stored weights of its vec4s k * WG + lid of the
// run (k < QAT_KEPT) and quantizes them itself, without reading them back (the rest of a longer run: qat_words,
// after a storage barrier; there is none for a run the kept vec4s cover).
// An int8 code word is one vec4; an int4 word is two, vec4s 2m and 2m + 1, whose 16-bit halves meet in qat_wh.
var<workgroup> qat_wh: array<u32, QAT_HALVES>;
var<workgroup> qat_back: u32;  // (1: the run is read back past its kept vec4s)
fn qat_end_kept(q: QatEntry, c0: u32, blk: QatRun, lid: u32, run: vec2<u32>,
                qv: ptr<function, array<vec4<f32>, QAT_KEPT>>) {
    let rows = qat_scale_rows(q, c0, blk, lid, run);
    let nv = select(0u, (blk.end - 4u * blk.first + 3u) / 4u, rows != 0u);  // (the run's vec4s)
    if (lid == 0u) { qat_back = u32(nv > QAT_HALVES); }
    if (workgroupUniformLoad(&qat_back) != 0u) { storageBarrier(); }  // (only a run longer than the kept vec4s)
    var pos = qat_pos(q, blk.elem + 4u * lid, 4u * WG);
    for (var k = 0u; k < QAT_KEPT; k++) {
        let j = k * WG + lid;
        if (j < nv) {
            let i = blk.first + j;
            let e = blk.elem + 4u * j;
            let c = select(0u, pos.c - c0, q.per_channel);
            let code = qat_code4(q, (*qv)[k], tail(i, blk.end), vec4<f32>(qat_wi[c]));
            let bits = qat_pack(code, q.bits);
            if (q.bits == 8u) { qat_put(q.code + e / 4u, bits); } else { qat_wh[j] = bits; }
            if (q.values != 0u) { qat_store_values(q, e, code, vec4<f32>(qat_ws[c])); }
        }
        qat_next(q, &pos);
    }
    workgroupBarrier();
    let per = select(2u, 1u, q.bits == 8u);
    for (var m = lid; per == 2u && m < QAT_HALVES / 2u && 2u * m < nv; m = m + WG) {  // (int4 words)
        let hi = select(0u, qat_wh[2u * m + 1u], 2u * m + 1u < nv);
        qat_put(q.code + (blk.elem + 8u * m) / 8u, qat_wh[2u * m] | (hi << 16u));
    }
    qat_words(q, c0, blk, lid, QAT_HALVES / per, rows);
}

@compute @workgroup_size(WG)
fn qat_amax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let blk = block_of(wid, nwg);
    let live = blk.tensor != NONE;
    let r = rec(select(0u, blk.tensor, live));
    let q = qat_entry(blk.tensor, live);
    let c0 = qat_first_channel(q, elem0(blk, r, blk.first));
    var run = vec2<u32>(c0, 0u);
    var pos = qat_pos(q, elem0(blk, r, blk.first + lid), 4u * WG);
    qat_begin(lid);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.first + k * WG + lid;
        if (q.on && 4u * i < blk.end) { qat_note(q, c0, pos, qat_load(i), tail(i, blk.end), &run); }
        qat_next(q, &pos);
    }
    qat_flush(q, c0, run);
    workgroupBarrier();
    qat_publish(q, c0, lid);
}

// One workgroup per exported tensor of the second pass: its channels' scales (and amax cleared for the next step).
@compute @workgroup_size(WG)
fn qat_rescale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let k = wid.x + wid.y * nwg.x;
    if (k >= qat_w(QH_EXPORTED)) { return; }
    let t = qat_w(qat_w(QH_ENT) + QAT_ENTRY_WORDS * k + QE_TENSOR);
    let q = qat_entry(t, true);
    if (!q.on || q.fused) { return; }
    for (var c = lid; c < q.channels; c = c + WG) {
        let s = qat_scale_of(q, bitcast<f32>(atomicExchange(&qat[q.amax + c], 0u)));
        qat_put(q.scale + c, bitcast<u32>(s));
        qat_put(q.inv + c, bitcast<u32>(fq_div(1.0, s)));
    }
}

fn qat_code4(q: QatEntry, w: vec4<f32>, keep: vec4<bool>, inv: vec4<f32>) -> vec4<f32> {
    let qmax = f32((1u << (q.bits - 1u)) - 1u);
    var out: vec4<f32>;
    for (var l = 0u; l < 4u; l++) {
        out[l] = select(fq_code(w[l], inv[l], 0.0, -qmax - 1.0, qmax, q.per_channel), 0.0, keep[l]);
    }
    return out;
}
fn qat_pack(c: vec4<f32>, bits: u32) -> u32 {
    let m = (1u << bits) - 1u;
    let u = bitcast<vec4<u32>>(vec4<i32>(c)) & vec4<u32>(m);
    return u.x | (u.y << bits) | (u.z << (2u * bits)) | (u.w << (3u * bits));
}
// The fake-quantized values code * scale of elements e .. e + 3 (e a multiple of 4).
fn qat_store_values(q: QatEntry, e: u32, c: vec4<f32>, s: vec4<f32>) {
    let v = c * s;
    if (q.values == 1u) {
        for (var l = 0u; l < 4u; l++) { qat_put(q.vals + e + l, bitcast<u32>(v[l])); }
    } else {
        let p = pack4_bf16(v);
        qat_put(q.vals + e / 2u, p.x);
        qat_put(q.vals + e / 2u + 1u, p.y);
    }
}
// The scales and reciprocals of the vec4 at offset `off` after p, from the second pass's per-channel words.
fn qat_lane_scales(q: QatEntry, p: QatPos, off: u32) -> array<vec4<f32>, 2> {
    let c = select(0u, p.c, q.per_channel);
    if (!q.per_channel || p.r + off + 3u < q.L) {  // (the four lanes in one channel)
        return array<vec4<f32>, 2>(vec4<f32>(bitcast<f32>(qat_w(q.scale + c))),
                                   vec4<f32>(bitcast<f32>(qat_w(q.inv + c))));
    }
    var s: vec4<f32>;
    var inv: vec4<f32>;
    for (var l = 0u; l < 4u; l++) {
        let cl = qat_lane(q, p, off, l);
        s[l] = bitcast<f32>(qat_w(q.scale + cl));
        inv[l] = bitcast<f32>(qat_w(q.inv + cl));
    }
    return array<vec4<f32>, 2>(s, inv);
}
// The second pass: the codes of the exported tensors of one chunk's blocks (a thread writes whole words: one vec4
// of int8 codes, two of int4), and their fake-quantized values where asked (a tensor's padding lanes get code 0).
@compute @workgroup_size(WG)
fn qat_encode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let blk = block_of(wid, nwg);
    if (blk.tensor == NONE) { return; }
    let q = qat_entry(blk.tensor, true);
    if (!q.on || q.fused) { return; }
    let r = rec(blk.tensor);
    qat_encode_words(q, blk, r, lid, false, 0u);
}

// qat_encode's variant (Optimizer.QAT_ENCODE = "cached"): the block's channels' scales and reciprocals read once
// into workgroup memory (a block over at most QAT_SLOTS channels; a longer one reads them per vec4 as qat_encode),
// not two atomic loads per vec4.
fn qat_cached_scales(q: QatEntry, p: QatPos, off: u32, c0: u32) -> array<vec4<f32>, 2> {
    if (!q.per_channel || p.r + off + 3u < q.L) {
        let c = select(0u, p.c - c0, q.per_channel);
        return array<vec4<f32>, 2>(vec4<f32>(qat_ws[c]), vec4<f32>(qat_wi[c]));
    }
    var s: vec4<f32>;
    var inv: vec4<f32>;
    for (var l = 0u; l < 4u; l++) {
        let cl = qat_lane(q, p, off, l) - c0;
        s[l] = qat_ws[cl];
        inv[l] = qat_wi[cl];
    }
    return array<vec4<f32>, 2>(s, inv);
}
@compute @workgroup_size(WG)
fn qat_encode_cached(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let blk = block_of(wid, nwg);
    let live = blk.tensor != NONE;
    let q = qat_entry(select(0u, blk.tensor, live), live);
    let on = q.on && !q.fused;
    let r = rec(select(0u, blk.tensor, live));
    let first = elem0(blk, r, blk.first);
    let n = select(1u, min(blk.end - 4u * blk.first, WG * EPT * 4u), on);  // (the block's elements)
    let c0 = qat_first_channel(q, first);
    let nc = qat_first_channel(q, first + n - 1u) - c0 + 1u;
    let cached = on && nc <= QAT_SLOTS;
    if (cached && lid < nc) {
        qat_ws[lid] = bitcast<f32>(qat_w(q.scale + c0 + lid));
        qat_wi[lid] = bitcast<f32>(qat_w(q.inv + c0 + lid));
    }
    workgroupBarrier();
    if (!on) { return; }
    qat_encode_words(q, blk, r, lid, cached, c0);
}

// The second pass's codes (and values) of block blk for thread lid: its vec4s' scales from workgroup memory where
// `cached` (qat_encode_cached; c0 the block's first channel), else per vec4 from the buffer (qat_encode).
fn qat_encode_words(q: QatEntry, blk: Block, r: Rec, lid: u32, cached: bool, c0: u32) {
    let per = select(2u, 1u, q.bits == 8u);  // vec4s per thread and word
    var pos = qat_pos(q, elem0(blk, r, blk.first + per * lid), 4u * per * WG);
    for (var k = 0u; k < EPT / per; k++) {
        let i0 = blk.first + per * (k * WG + lid);
        if (4u * i0 >= blk.end) { return; }
        let e = elem0(blk, r, i0);
        let p = pos;
        qat_next(q, &pos);
        var word = 0u;
        for (var j = 0u; j < per; j++) {
            let i = i0 + j;
            var sc: array<vec4<f32>, 2>;
            if (cached) { sc = qat_cached_scales(q, p, 4u * j, c0); } else { sc = qat_lane_scales(q, p, 4u * j); }
            let c = qat_code4(q, qat_load(i), tail(i, blk.end), sc[1]);
            word = word | (qat_pack(c, q.bits) << (16u * j));
            if (q.values != 0u && 4u * i < blk.end) { qat_store_values(q, e + 4u * j, c, sc[0]); }
        }
        qat_put(q.code + e * q.bits / 32u, word);
    }
}
