#!/bin/bash
# session 2026-12-07 (second), command B (inline on the warm machine after next_command.sh): how much of the 8-bit
# step is the shaders' bounds clamps (WebGPU's robustness; Dawn's disable_robustness toggle turns them off), vlog
# there too; the floor without any map (x-maps) beside it; then, on an H200 only, the 16-bit, LAMB and MARS rows.
source .gl/gpu_env.sh >/dev/null; export PYTHONUNBUFFERED=1
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED" $OUT/kv_$tag.txt | head -n 40; sed -n '/^optimizer/,$p' $OUT/kv_$tag.txt | awk '{print $1, $2, $4, $(NF-2), $(NF-1), $NF}'; }
RLX_GPU_IMPLEMENTATION=dawn RLX_GPU_DAWN_DISABLE_ROBUSTNESS=1 kv dawnq8_norobust 80 --optimizers adamw8bit --precisions fp32,bf16 --variants default,+qvlog,x-maps --budget-s 50
RLX_GPU_IMPLEMENTATION=dawn kv dawnq8_robust 80 --optimizers adamw8bit --precisions fp32,bf16 --variants default,+qvlog,x-maps --budget-s 50
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && kv h200rows 230 --optimizers adamw,qhadamw,lamb,mars --precisions bf16,f16 --variants default --budget-s 180
# Then inline on the same warm H100 (recorded here as they ran):
#  C: RLX_GPU_IMPLEMENTATION=dawn pytest tests/test_qclosed.py -k vlog (2 passed); kernel_variants.py --optimizers
#     adamw8bit --precisions fp32,bf16 --variants +qvlog,default --rounds 5 --budget-s 70, twice -> kv_q8rev1/2
#  D: (the fallback lane by lane) pytest tests/test_qclosed.py tests/test_kernel_variants.py -k vlog on both
#     implementations (2 + 2 passed); --variants default,+qvlog --rounds 5 on wgpu-native, Dawn, Dawn without
#     robustness -> kv_q8_lanes, kv_dawnq8_lanes, kv_dawnq8_norobust_lanes
#  E: (QFORM8 = "vlog" made the default) --optimizers adamw8bit,adamw4bit --precisions fp32,bf16 --variants
#     default,+qlog --rounds 3 -> kv_status.*
#  F: pytest -x tests/test_quantized.py tests/test_qclosed.py tests/test_kernel_variants.py (139 passed, then the
#     old-default assert failed, since changed); the rest of test_kernel_variants.py (78 passed); Dawn:
#     test_quantized.py and test_qclosed.py (74 passed)
