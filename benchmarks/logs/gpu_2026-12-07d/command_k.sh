#!/bin/bash
# session 2026-12-07 (fourth), command K: QREDUX where a subgroup holds several blocks (4-bit's 16-thread blocks on
# NVIDIA's 32 lanes: one masked subgroupMax/subgroupAny pair a block, PERF_NOTES 83). q_bmax alone on NVIDIA (both
# implementations), then the 4-bit and 8-bit rows against -qredux (the shuffles: 4-bit's code before this change)
# in one order and the reverse, with 8-bit's "vlogi" (vlog's floor and float-to-int conversion by the adder and
# integer operations, and 4-bit's "lineari" alike, PERF_NOTES 84), Dawn's rows, then the quantized variants' bit tests (last session's command J).
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/card_k.txt
t() { local tag=$1 s=$2; shift 2; timeout $s python3 -m pytest -q "$@" > $OUT/tests_$tag.txt 2>&1; echo "$tag: $(tail -n 1 $OUT/tests_$tag.txt)"; grep -E "^E  .*(param|state of|differ)|^FAILED" $OUT/tests_$tag.txt | head -n 8; }
kv() { local tag=$1 s=$2; shift 2; timeout $s python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED|Error" $OUT/kv_$tag.txt | head -n 20; }
t qbmax 60 tests/test_qbmax.py tests/test_qclosed.py -k "qbmax or vlog or linear"
RLX_GPU_IMPLEMENTATION=dawn t qbmax_dawn 60 tests/test_qbmax.py tests/test_qclosed.py -k "qbmax or vlog or linear"
Q="--optimizers adamw4bit,adamw8bit --precisions fp32,bf16"
kv kfwd 100 $Q --variants default,-qredux,+qvlogi,+qlin4i --rounds 3 --budget-s 70
kv krev 100 $Q --variants +qlin4i,+qvlogi,-qredux,default --rounds 3 --budget-s 70
RLX_GPU_IMPLEMENTATION=dawn kv kdawn 70 $Q --variants default,-qredux,+qvlogi,+qlin4i --rounds 3 --budget-s 50
t kv 80 tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)"
RLX_GPU_IMPLEMENTATION=dawn t kv_dawn 80 tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)"
