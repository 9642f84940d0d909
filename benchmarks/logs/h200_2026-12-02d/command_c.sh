#!/bin/bash
# session 2026-12-02d, command C: SOAP and Kron float16 on Dawn with robustness off (RLX_GPU_DAWN_DISABLE_ROBUSTNESS=1,
# the documented opt-in) beside the default device, and SOAP against pytorch_optimizer in the same command
source .gl/gpu_env.sh || exit 1
mkdir -p $OUT/def $OUT/nr
timeout 150 python3 -u benchmarks/matrix_h200.py --only soap,dawn_f16 --total 140 --out $OUT/def > $OUT/def/matrix_h200.txt 2>&1; tail -n 12 $OUT/def/matrix_h200.txt
RLX_GPU_DAWN_DISABLE_ROBUSTNESS=1 timeout 70 python3 -u benchmarks/matrix_h200.py --only dawn_f16 --total 60 --out $OUT/nr > $OUT/nr/matrix_h200.txt 2>&1; tail -n 7 $OUT/nr/matrix_h200.txt
