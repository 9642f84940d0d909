#!/bin/bash
# session 2026-12-02e, command A: the GEMMs' split K (linalg.record.SPLIT, PERF_NOTES 74) on the H200: its tests
# first (wgpu-native), then SOAP's refresh taken apart with split K off (k0) and on (the default)
# in one run, then SOAP and Kron against pytorch_optimizer with the new default (float32, and float16 on Dawn)
source .gl/gpu_env.sh || exit 1
timeout 80 python3 -m pytest -q -x tests/test_muon.py -k "split or matmul" tests/test_factor.py tests/test_soap.py -k "split or matmul or follow" > $OUT/tests_split.txt 2>&1; tail -n 3 $OUT/tests_split.txt
timeout 180 python3 -u benchmarks/matrix_phases.py --only soap --wide 128:p1024:k0,128:p1024 --total 170 > $OUT/phases.txt 2>&1; tail -n 30 $OUT/phases.txt
timeout 250 python3 -u benchmarks/matrix_h200.py --only soap,kron,dawn_f16 --total 240 > $OUT/matrix_h200.txt 2>&1; tail -n 30 $OUT/matrix_h200.txt
