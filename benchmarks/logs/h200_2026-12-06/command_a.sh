#!/bin/bash
# session 2026-12-06, command A (the session's one H200 command, cut to the device time left after five machine
# starts failed): the float32 GEMM's staging variants (PERF_NOTES 76) and Adafactor.RSQRT (PERF_NOTES 75): the
# staging's same-bits tests on wgpu-native (NVIDIA's compiler), the GEMMs and Muon's float32 step with PREFETCH
# 0 / 1 / 2 beside torch.optim.Muon, then Adafactor bf16 default / +rsqrt / x-dir
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
timeout 35 python3 -m pytest -q -x tests/test_gemm_staging.py > $OUT/tests_wgpu.txt 2>&1; tail -n 2 $OUT/tests_wgpu.txt
timeout 75 python3 -u benchmarks/gemm_staging.py --only gemm,muon --budget 30 --json $OUT/gemm_staging.json > $OUT/gemm_staging.txt 2>&1; sed -n "/^{/,/^}/p" $OUT/gemm_staging.txt | grep -E "gemm_tflops|_ms\"|vs_baseline|error|stopping" | head -n 40; grep -E "error|stopping" $OUT/gemm_staging.txt | head
PYTHONPATH=.:$PYTHONPATH timeout 55 python3 -u benchmarks/adafactor_passes.py --precisions bf16 --variants default,+rsqrt,x-dir --budget-s 25 --json $OUT/ada_rsqrt.json > $OUT/ada_rsqrt.txt 2>&1; grep -E "whole|^[0-9]+ s" $OUT/ada_rsqrt.txt
