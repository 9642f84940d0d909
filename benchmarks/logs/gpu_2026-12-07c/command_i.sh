#!/bin/bash
# session 2026-12-07 (third), command I (QREDUX made the default after command H): the Dawn test that failed in H
# (its log), then QHOIST over the new default in both orders, wgpu-native and Dawn; the targets' baselines beside.
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
RLX_GPU_IMPLEMENTATION=dawn timeout 100 python3 -m pytest -q -x tests/test_kernel_variants.py -k "AdamW and state_bits and float32" > $OUT/tests_i_dawn.txt 2>&1; grep -E "^E |Error|passed|failed" $OUT/tests_i_dawn.txt | head -n 30
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED|Error" $OUT/kv_$tag.txt | head -n 20; }
Q="--optimizers adamw8bit,adamw4bit --precisions fp32,bf16"
kv ifwd 90 $Q --variants default,+qhoist,-qredux --rounds 3 --budget-s 60
kv irev 90 $Q --variants +qhoist,default --rounds 3 --budget-s 60
RLX_GPU_IMPLEMENTATION=dawn kv idawn 90 $Q --variants default,+qhoist --rounds 3 --budget-s 60
