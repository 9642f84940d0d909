#!/bin/bash
# session 2026-12-02d, command B: SOAP against pytorch_optimizer in one run (float32, gemm16 on wgpu-native), then
# SOAP and Kron float16 on Dawn's tensor cores again (a second round of command A's Dawn figures)
source .gl/gpu_env.sh || exit 1
timeout 200 python3 -u benchmarks/matrix_h200.py --only soap,dawn_f16 --total 190 > $OUT/matrix_h200.txt 2>&1; tail -n 30 $OUT/matrix_h200.txt
