#!/bin/bash
# session 2026-12-07 (second), command G (a new machine): QHOIST (the quantized subgroup driver reads a tensor's
# record once per run of its blocks, and the grads' multiplier once, not every round): its bit tests on NVIDIA's
# compiler (the quantized variants against the plain driver), then +qhoist against the default in both orders,
# 8-bit and 4-bit, fp32 and bf16 params; Dawn's 8-bit rows.
# Not run: the session's device budget ran out first (PERF_NOTES 81). Ready for the next session (~250 s):
# the device tool's `run` with carry [".gl", ".whl"] and `bash benchmarks/logs/gpu_2026-12-07b/command_g.sh`.
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card_g.txt
timeout 90 python3 -m pytest -q tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)" > $OUT/tests_g.txt 2>&1; tail -n 2 $OUT/tests_g.txt
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|FAILED|Error" $OUT/kv_$tag.txt | head -n 20; }
kv hoist 110 --optimizers adamw8bit,adamw4bit --precisions fp32,bf16 --variants default,+qhoist --rounds 3 --budget-s 80
kv hoistrev 70 --optimizers adamw8bit --precisions fp32,bf16 --variants +qhoist,default --rounds 3 --budget-s 40
RLX_GPU_IMPLEMENTATION=dawn kv dawnhoist 70 --optimizers adamw8bit --precisions fp32,bf16 --variants default,+qhoist --rounds 3 --budget-s 40
