#!/bin/bash
# session 2026-12-07 (sixth), command A: QBTAB (the quantized subgroup driver's QK block-table rows and their ACTIVE
# flags read once into workgroup memory before the maps' barrier, with the first block's record; PERF_NOTES 85):
# the 8-bit and 4-bit rows default against +qbtab in one order and the reverse, its bit tests on NVIDIA, Dawn's
# rows and bit tests; the forward run also times the floors without the maps (x-maps), without the block maxima
# (x-bmax, new) and without both (x-floor, new: results wrong on purpose, qdiag.py); on an H200, issue 25's
# default rows after it (command L of 2026-12-07d's first line). Not run in that session: no machine started.
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/card_a.txt
t() { local tag=$1 s=$2; shift 2; timeout $s python3 -m pytest -q "$@" > $OUT/tests_$tag.txt 2>&1; echo "$tag: $(tail -n 1 $OUT/tests_$tag.txt)"; grep -E "^E  .*(param|state of|differ)|^FAILED" $OUT/tests_$tag.txt | head -n 8; }
kv() { local tag=$1 s=$2; shift 2; timeout $s python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED|Error" $OUT/kv_$tag.txt | head -n 20; sed -n '/^optimizer/,$p' $OUT/kv_$tag.txt | head -n 12; }
Q="--optimizers adamw8bit,adamw4bit --precisions fp32,bf16"
kv afwd 90 $Q --variants default,+qbtab,x-maps,x-bmax,x-floor --rounds 3 --budget-s 70
kv arev 70 $Q --variants +qbtab,default --rounds 3 --budget-s 50
t kv 130 tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)"
RLX_GPU_IMPLEMENTATION=dawn kv adawn 70 $Q --variants default,+qbtab --rounds 3 --budget-s 50
RLX_GPU_IMPLEMENTATION=dawn t kv_dawn 110 tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)"
if grep -q H200 $OUT/card_a.txt && [ $SECONDS -lt 440 ]; then
  kv rows 140 --optimizers adamw,adamw8bit,adamw4bit,lamb,mars,adafactor --precisions fp32,bf16,f16,bf16-master --variants default --rounds 2 --budget-s 110
fi
