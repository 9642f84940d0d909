#!/bin/bash
# session 2026-12-02b, command D: SOAP and Kron against pytorch_optimizer with the new defaults (issue 24's rows)
source .gl/gpu_env.sh || exit 1
timeout 240 python3 -u benchmarks/matrix_h200.py --only soap,kron,dawn_f16 --total 230 > $OUT/matrix_h200.txt 2>&1; tail -n 30 $OUT/matrix_h200.txt
