#!/bin/bash
# session 2026-12-02d, command A: Kron against pytorch_optimizer in one run (float32 and gemm16 on wgpu-native),
# then SOAP and Kron float16 on Dawn's tensor cores (the defaults of 2026-12-02c: householder.PANEL 1024)
source .gl/gpu_env.sh || exit 1
timeout 200 python3 -u benchmarks/matrix_h200.py --only kron,dawn_f16 --total 190 > $OUT/matrix_h200.txt 2>&1; tail -n 30 $OUT/matrix_h200.txt
