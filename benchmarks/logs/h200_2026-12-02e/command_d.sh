#!/bin/bash
# session 2026-12-02e, command D: Adafactor.RSQRT (PERF_NOTES 75): its tests on the H200 first (both
# implementations), then Adafactor's step pass by pass, default / +rsqrt / x-dir in the same alternating rounds, in
# bf16, f16 and fp32 (GPT-2 124M)
source .gl/gpu_env.sh || exit 1
timeout 60 python3 -m pytest -q tests/test_adafactor_switches.py > $OUT/tests_rsqrt.txt 2>&1; tail -n 2 $OUT/tests_rsqrt.txt
RLX_GPU_IMPLEMENTATION=dawn timeout 60 python3 -m pytest -q tests/test_adafactor_switches.py -k "rsqrt or cscale" > $OUT/tests_rsqrt_dawn.txt 2>&1; tail -n 2 $OUT/tests_rsqrt_dawn.txt
PYTHONPATH=.:$PYTHONPATH timeout 130 python3 -u benchmarks/adafactor_passes.py --precisions bf16,f16,fp32 --variants default,+rsqrt,x-dir --budget-s 100 --json $OUT/ada_rsqrt.json > $OUT/ada_rsqrt.txt 2>&1; grep -E "whole|update_norm|apply|^[0-9]+ s" $OUT/ada_rsqrt.txt
