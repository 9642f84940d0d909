#!/usr/bin/env bash
# Issue 26's "re-measure the GPU-timestamp bench rows after the move (within 2%)": the tree before the issue's work
# (OLD, made by benchmarks/ab_old_tree.sh) against this one, on one adapter, in at most ~185 s:
#   1. benchmarks/ab.py OLD . : `rlx-gpu bench` rows (GPU timestamps) AdamW, Lion, SGD, Muon and AdamW+scaler (the
#      checked step: gate.wgsl's choose and gate_step every step) on gpt2-124m in fp32 and bf16, two alternating
#      rounds (ab.json);
#   2. benchmarks/muon_bench.py from each tree, alternating OLD NEW: the tiled f32 GEMM (gemm.wgsl) and f16 GEMM
#      (gemm16.wgsl) at 4096^3 and a Muon step on GPT-2 124M's 48 hidden matrices with f32 / f16 Newton-Schulz
#      (muon_<tree>.json; torch's rows as a reference of the card's state).
# A part that fails or runs out of time prints why and the next one goes on. Results under $OUT (default ./out).
#
#     bash benchmarks/ab_old_tree.sh 4aa41c8^1 ab_old    # here, first
#     source .gl/gpu_env.sh && bash benchmarks/ab_arch.sh ab_old     # on the device
set -uo pipefail
old=${1:?usage: ab_arch.sh OLD_DIR}
out=${OUT:-out}
mkdir -p "$out"
[ -d "$old/rlx_gpu" ] || { echo "ab_arch: $old holds no rlx_gpu (run benchmarks/ab_old_tree.sh first)"; exit 2; }
echo "old: $(cat "$old/COMMIT" 2>/dev/null)  new: $(git rev-parse HEAD 2>/dev/null || echo '(this tree)')"
timeout 112 python3 benchmarks/ab.py "$old" . --rounds 2 --timeout 54 --json "$out/ab.json" -- \
    --optimizers adamw,lion,sgd,muon,adamw+scaler --sets gpt2-124m --precisions fp32,bf16 --repeats 5 \
    --no-torch --no-numpy --no-host --no-latency || echo "ab.py: exit $? (rows measured so far: $out/ab.json)"
for tree in "$old" .; do
    name=$([ "$tree" = . ] && echo new || echo old)
    PYTHONPATH="$(cd "$tree" && pwd)${PYTHONPATH:+:$PYTHONPATH}" timeout 34 python3 "$tree/benchmarks/muon_bench.py" \
        --rounds 2 --json "$out/muon_$name.json" > "$out/muon_$name.log" 2>&1 \
        || { echo "muon_bench ($name): exit $?"; tail -5 "$out/muon_$name.log"; }
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
figs = {}
for name in ("old", "new"):
    try:
        with open(os.path.join(out, f"muon_{name}.json")) as f:
            figs[name] = json.load(f)
    except (OSError, ValueError) as e:
        print(f"muon_{name}.json: {e}")
if len(figs) == 2:
    flat = {n: (d.get("figures", d) if isinstance(d, dict) else {}) for n, d in figs.items()}
    print("| figure | old | new | old/new |\n|---|---|---|---|")
    for k in sorted(set(flat["old"]) & set(flat["new"])):
        a, b = flat["old"][k], flat["new"][k]
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
            print(f"| {k} | {a:.3f} | {b:.3f} | {a / b:.3f} |")
PY
