#!/bin/bash
# session 2026-12-02e, command C: the final defaults (split K below 400 tiles: Muon's float32 X X^T not split):
# Muon and the GEMMs against torch, then SOAP and Kron against pytorch_optimizer (float32, and float16 on Dawn)
source .gl/gpu_env.sh || exit 1
timeout 150 python3 benchmarks/muon_bench.py --json $OUT/muon.json > $OUT/muon.txt 2>&1; tail -n 14 $OUT/muon.txt
timeout 250 python3 -u benchmarks/matrix_h200.py --only soap,kron,dawn_f16 --total 240 --out /tmp/m > $OUT/matrix_h200.txt 2>&1; tail -n 20 $OUT/matrix_h200.txt; cp /tmp/m/matrix_h200.json $OUT/
