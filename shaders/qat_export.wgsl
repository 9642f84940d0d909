// The optimizers' `qat=` export (rlx_gpu/engine/qat.py), part of the module of a bucket holding tensors with a
// quantized copy: the update pass notes each updated weight's |w| in its tensor's (or channel's) amax (workgroup
// atomics, then one global atomicMax per channel and workgroup), qat_rescale turns amax into torch.ao's symmetric
// scale, max(amax / ((qmax - qmin) / 2), eps), and its exact reciprocal, and qat_encode writes the codes (int8: four
// per word, int4: eight, low bits first) and, if asked, the fake-quantized values (float32 or bfloat16). qat_amax
// does the first part without an update (a copy of weights written from the host). The twin is
// rlx_gpu/reference/qat.py's export_copy.
//   qat words: [0] tensors, [1] K exported tensors, [2] ENT, [3] AMAX, [4] INV (word offsets), [5] eps (f32 bits),
//   [6] 1 = every exported tensor (a refresh from the host), else only those with a grad this step;
//   [16 + t] = k + 1 for tensor t's entry k (0: none); entry k at ENT + 8k: tensor, flags (bit 0 per channel,
//   bits 8..15 code bits, bits 16..17 values: 1 float32, 2 bfloat16), row length L, channels, first channel,
//   first code word, first values word; AMAX + c: |w| bits of channel c; INV + c: 1/scale of channel c.
// #include "qat.wgsl"

@group(0) @binding(N) var<storage, read_write> qat: array<atomic<u32>>;
@group(0) @binding(N) var<storage, read_write> qat_scale: array<f32>;
@group(0) @binding(N) var<storage, read_write> qat_codes: array<u32>;
@group(0) @binding(N) var<storage, read_write> qat_values: array<u32>;

const QAT_SLOTS: u32 = 64u;
var<workgroup> qat_wm: array<atomic<u32>, 64>;

struct QatEntry { on: bool, per_channel: bool, bits: u32, values: u32, L: u32, channels: u32, chan: u32, code: u32,
                  vals: u32 }

fn qat_w(i: u32) -> u32 { return atomicLoad(&qat[i]); }
// Tensor t's entry; `on` false where t has none, or (in a step) no grad.
fn qat_entry(t: u32, live: bool) -> QatEntry {
    var q: QatEntry;
    let k = select(0u, qat_w(16u + t), live && t < qat_w(0u));
    q.on = k != 0u && (qat_w(6u) == 1u || has(rec(t), ACTIVE));
    let b = qat_w(2u) + 8u * (max(k, 1u) - 1u);
    let f = qat_w(b + 1u);
    q.per_channel = (f & 1u) != 0u;
    q.bits = (f >> 8u) & 255u;
    q.values = (f >> 16u) & 3u;
    q.L = max(qat_w(b + 2u), 1u);
    q.channels = qat_w(b + 3u);
    q.chan = qat_w(b + 4u);
    q.code = qat_w(b + 5u);
    q.vals = qat_w(b + 6u);
    return q;
}
fn qat_first_channel(q: QatEntry, e: u32) -> u32 { return select(0u, e / q.L, q.per_channel); }

fn qat_begin(lid: u32) {
    if (lid < QAT_SLOTS) { atomicStore(&qat_wm[lid], 0u); }
    workgroupBarrier();
}
// The stored weights w of elements e .. e + 3 (lanes `keep` are padding), into the amax of their channels.
fn qat_note(q: QatEntry, c0: u32, e: u32, w: vec4<f32>, keep: vec4<bool>) {
    if (!q.on) { return; }
    let m = bitcast<vec4<u32>>(w) & vec4<u32>(0x7fffffffu);  // (u32 order is |w| order; NaN above inf)
    for (var l = 0u; l < 4u; l++) {
        if (!keep[l] && m[l] != 0u) {
            let c = qat_first_channel(q, e + l);
            if (c - c0 < QAT_SLOTS) { atomicMax(&qat_wm[c - c0], m[l]); }
            else { atomicMax(&qat[qat_w(3u) + q.chan + c], m[l]); }
        }
    }
}
fn qat_end(q: QatEntry, c0: u32, lid: u32) {
    workgroupBarrier();
    if (q.on && lid < QAT_SLOTS && c0 + lid < q.channels) {
        let v = atomicLoad(&qat_wm[lid]);
        if (v != 0u) { atomicMax(&qat[qat_w(3u) + q.chan + c0 + lid], v); }
    }
}

@compute @workgroup_size(WG)
fn qat_amax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let blk = block_of(wid, nwg);
    let live = blk.x != NONE;
    let r = rec(select(0u, blk.x, live));
    let q = qat_entry(blk.x, live);
    let c0 = qat_first_channel(q, elem0(blk, r, blk.y));
    qat_begin(lid);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (q.on && 4u * i < blk.z) { qat_note(q, c0, elem0(blk, r, i), qat_load(i), tail(i, blk.z)); }
    }
    qat_end(q, c0, lid);
}

// One workgroup per exported tensor: its channels' scales (and amax cleared for the next step).
@compute @workgroup_size(WG)
fn qat_rescale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let k = wid.x + wid.y * nwg.x;
    if (k >= qat_w(1u)) { return; }
    let t = qat_w(qat_w(2u) + 8u * k);
    let q = qat_entry(t, true);
    if (!q.on) { return; }
    let qmax = f32((1u << (q.bits - 1u)) - 1u);
    let eps = bitcast<f32>(qat_w(5u));
    for (var c = lid; c < q.channels; c = c + WG) {
        let a = qat_w(3u) + q.chan + c;
        let amax = bitcast<f32>(atomicExchange(&qat[a], 0u));
        let s0 = fq_div(amax, qmax + 0.5);  // ((qmax - qmin) / 2 = qmax + 0.5)
        let s = select(select(s0, eps, s0 < eps), s0, fq_isnan(s0));
        qat_scale[q.chan + c] = s;
        atomicStore(&qat[qat_w(4u) + q.chan + c], bitcast<u32>(fq_div(1.0, s)));
    }
}

fn qat_code4(q: QatEntry, e: u32, w: vec4<f32>, keep: vec4<bool>) -> vec4<f32> {
    let qmax = f32((1u << (q.bits - 1u)) - 1u);
    var out: vec4<f32>;
    for (var l = 0u; l < 4u; l++) {
        let c = qat_first_channel(q, e + l);
        let inv = bitcast<f32>(qat_w(qat_w(4u) + q.chan + c));
        out[l] = select(fq_code(w[l], inv, 0.0, -qmax - 1.0, qmax, q.per_channel), 0.0, keep[l]);
    }
    return out;
}
fn qat_pack(c: vec4<f32>, bits: u32) -> u32 {
    let m = (1u << bits) - 1u;
    let u = bitcast<vec4<u32>>(vec4<i32>(c)) & vec4<u32>(m);
    return u.x | (u.y << bits) | (u.z << (2u * bits)) | (u.w << (3u * bits));
}
fn qat_store_values(q: QatEntry, e: u32, c: vec4<f32>) {
    var v: vec4<f32>;
    for (var l = 0u; l < 4u; l++) { v[l] = c[l] * qat_scale[q.chan + qat_first_channel(q, e + l)]; }
    if (q.values == 1u) {
        for (var l = 0u; l < 4u; l++) { qat_values[q.vals + e + l] = bitcast<u32>(v[l]); }
    } else {
        let p = pack4_bf16(v);
        qat_values[q.vals + e / 2u] = p.x;
        qat_values[q.vals + e / 2u + 1u] = p.y;
    }
}
// The codes of the exported tensors of one chunk's blocks (a thread writes whole words: one vec4 of int8 codes,
// two of int4), and their fake-quantized values where asked (a tensor's padding lanes get code 0).
@compute @workgroup_size(WG)
fn qat_encode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let blk = block_of(wid, nwg);
    if (blk.x == NONE) { return; }
    let q = qat_entry(blk.x, true);
    if (!q.on) { return; }
    let r = rec(blk.x);
    let per = select(2u, 1u, q.bits == 8u);  // vec4s per thread and word
    for (var k = 0u; k < EPT / per; k++) {
        let i0 = blk.y + per * (k * WG + lid);
        if (4u * i0 >= blk.z) { return; }
        let e = elem0(blk, r, i0);
        var word = 0u;
        for (var j = 0u; j < per; j++) {
            let i = i0 + j;
            let keep = tail(i, blk.z);
            let c = qat_code4(q, e + 4u * j, qat_load(i), keep);
            word = word | (qat_pack(c, q.bits) << (16u * j));
            if (q.values != 0u && 4u * i < blk.z) { qat_store_values(q, e + 4u * j, c); }
        }
        qat_codes[q.code + e * q.bits / 32u] = word;
    }
}
