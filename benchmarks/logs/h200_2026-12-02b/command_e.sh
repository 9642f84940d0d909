#!/bin/bash
# session 2026-12-02b, command E: the adopted Adafactor defaults against each switch off (same rounds); LAMB f16's F16ROUND
source .gl/gpu_env.sh || exit 1
timeout -s INT 140 python -u benchmarks/adafactor_passes.py --precisions bf16,f16,fp32 --variants default,-recip,-ptloads,-recip-ptloads --budget-s 95 --json $OUT/ada_defaults.json > $OUT/ada_defaults.txt 2>&1; grep -E "whole step|left out|Error" $OUT/ada_defaults.txt
timeout 70 python -u benchmarks/kernel_variants.py --optimizers lamb --precisions f16,bf16 --variants default,-f16round --budget-s 35 --json $OUT/kv_f16round.json > $OUT/kv_f16round.txt 2>&1; tail -n 4 $OUT/kv_f16round.txt
