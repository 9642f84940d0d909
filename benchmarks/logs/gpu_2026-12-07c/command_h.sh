#!/bin/bash
# session 2026-12-07 (third), command H: the quantized subgroup driver's three switches (PERF_NOTES 81-82):
# QHOIST (the record once per tensor), QREDUX (block maxima by subgroupMax/subgroupAny), QPREFETCH (the next
# round's words loaded before this round's work). Their bit tests on NVIDIA's compiler (both implementations),
# then each against the default in one order and the reverse (kernel_variants.py keeps the order given since this
# session), then Dawn's rows, then the floors with all three on (x-maps).
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/card_h.txt
timeout 150 python3 -m pytest -q -x tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)" > $OUT/tests_h.txt 2>&1; tail -n 2 $OUT/tests_h.txt
RLX_GPU_IMPLEMENTATION=dawn timeout 100 python3 -m pytest -q -x tests/test_kernel_variants.py -k "AdamW and state_bits and (float32 or bfloat16-)" > $OUT/tests_h_dawn.txt 2>&1; tail -n 2 $OUT/tests_h_dawn.txt
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED|Error" $OUT/kv_$tag.txt | head -n 20; }
Q="--optimizers adamw8bit,adamw4bit --precisions fp32,bf16"
kv fwd 120 $Q --variants default,+qhoist,+qredux,+qprefetch,qall --rounds 3 --budget-s 90
kv rev 120 $Q --variants qall,+qprefetch,+qredux,+qhoist,default --rounds 3 --budget-s 90
RLX_GPU_IMPLEMENTATION=dawn kv dawn 100 $Q --variants default,+qhoist,+qredux,+qprefetch,qall --rounds 3 --budget-s 70
