#!/bin/bash
# session 2026-12-06 (second), command C: the same targets' key rows on Dawn (with the toggles the package sets),
# Adafactor's 16-bit rows on Dawn, then the host path's figures (wgpu-native) on this card
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
RLX_GPU_IMPLEMENTATION=dawn timeout 150 python3 -u benchmarks/kernel_variants.py --variants default --optimizers adamw,lamb,mars,adamw8bit --precisions bf16,f16 --budget-s 110 --json $OUT/kv_dawn.json > $OUT/kv_dawn.txt 2>&1; sed -n '/^optimizer/,$p' $OUT/kv_dawn.txt | awk '{print $1, $2, $4, $(NF-3), $(NF-1), $NF}'; grep -E "left out|Error" $OUT/kv_dawn.txt | head
RLX_GPU_IMPLEMENTATION=dawn PYTHONPATH=.:$PYTHONPATH timeout 70 python3 -u benchmarks/adafactor_passes.py --precisions bf16,f16 --variants default --budget-s 30 --json $OUT/ada_dawn.json > $OUT/ada_dawn.txt 2>&1; grep -E "whole|Error" $OUT/ada_dawn.txt
timeout 150 python3 -u benchmarks/host_bench.py --rounds 5 --steps 200 --json $OUT/host_bench.json > $OUT/host_bench.txt 2>&1; grep -vE "^\s*$" $OUT/host_bench.txt | tail -n 25
