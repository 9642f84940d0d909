#!/bin/bash
# session 2026-12-06 (second), command A: the fuller form of benchmarks/logs/h200_2026-12-06/command_a.sh, which never
# ran (no machine): the float32 GEMM staging variants (PERF_NOTES 76) and Adafactor.RSQRT (PERF_NOTES 75): their tests on
# wgpu-native first (the same bits on NVIDIA's compiler), the GEMMs and the Muon / Kron / SOAP float32 steps with
# PREFETCH 0 / 1 / 2 beside torch.optim.Muon and pytorch_optimizer, Adafactor default / +rsqrt / x-dir, the tests on Dawn
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card.txt
timeout 75 python3 -m pytest -q tests/test_gemm_staging.py tests/test_adafactor_switches.py > $OUT/tests_wgpu.txt 2>&1; tail -n 2 $OUT/tests_wgpu.txt
timeout 175 python3 -u benchmarks/gemm_staging.py --budget 110 --json $OUT/gemm_staging.json > $OUT/gemm_staging.txt 2>&1; sed -n "/^{/,/^}/p" $OUT/gemm_staging.txt | grep -E "gemm_tflops|_ms\"|vs_baseline|error|stopping" | head -n 60; grep -E "error|stopping" $OUT/gemm_staging.txt | head
PYTHONPATH=.:$PYTHONPATH timeout 125 python3 -u benchmarks/adafactor_passes.py --precisions bf16,f16,fp32 --variants default,+rsqrt,x-dir --budget-s 95 --json $OUT/ada_rsqrt.json > $OUT/ada_rsqrt.txt 2>&1; grep -E "whole|^[0-9]+ s" $OUT/ada_rsqrt.txt
RLX_GPU_IMPLEMENTATION=dawn timeout 60 python3 -m pytest -q tests/test_gemm_staging.py tests/test_adafactor_switches.py -k "staging or rsqrt or cscale" > $OUT/tests_dawn.txt 2>&1; tail -n 2 $OUT/tests_dawn.txt
