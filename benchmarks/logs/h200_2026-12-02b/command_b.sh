#!/bin/bash
# session 2026-12-02b, command B: SOAP's and Kron's phases with WIDE 0 and 128; the host path with a scheduled lr
source .gl/gpu_env.sh || exit 1
timeout 178 python3 -u benchmarks/matrix_phases.py --wide 0,128 --total 170 > $OUT/matrix_phases.txt 2>&1; tail -45 $OUT/matrix_phases.txt
timeout 150 python3 -u benchmarks/host_bench.py --rounds 5 --steps 200 --json $OUT/host_bench.json > $OUT/host_bench.txt 2>&1; grep -E "tensors|torch|drop" $OUT/host_bench.txt | head -20
