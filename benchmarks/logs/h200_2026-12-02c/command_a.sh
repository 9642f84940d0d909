#!/bin/bash
# session 2026-12-02c, command A: the new switches' tests on the H200 (both implementations), Adafactor's knock-outs
# and CSCALE (ada7, PERF_NOTES 70), the SOAP refresh with householder.PANEL 256 / 1024 (PERF_NOTES 73)
source .gl/gpu_env.sh || exit 1
T="tests/test_adafactor_switches.py tests/test_factor.py tests/test_soap.py tests/test_matrix_phases.py"
for impl in wgpu-native dawn; do
  RLX_GPU_IMPLEMENTATION=$impl timeout 90 python -m pytest -q -p no:cacheprovider -n 12 $T > $OUT/tests_$impl.txt 2>&1; echo "$impl: $(tail -n 1 $OUT/tests_$impl.txt)"
done
timeout 135 python3 -u benchmarks/adafactor_passes.py --precisions bf16,f16,fp32 --variants default,+cscale,x-dir,x-loads,x-div,x-red --budget-s 90 --json $OUT/ada7_passes.json > $OUT/ada7_passes.txt 2>&1; grep -E "whole|update_norm|apply |^[0-9]+ s" $OUT/ada7_passes.txt | head -60
timeout 175 python3 benchmarks/matrix_phases.py --only soap --wide 128,128:p1024 --total 165 > $OUT/panel_phases.txt 2>&1; tail -30 $OUT/panel_phases.txt
