#!/bin/bash
# session 2026-12-02b, command C: the new defaults' tests on the H200 (both implementations), the reducing rows'
# variants against the new defaults, the host path with a scheduled lr
source .gl/gpu_env.sh || exit 1
T="tests/test_soap.py tests/test_kron.py tests/test_factor.py tests/test_adafactor_switches.py tests/test_parity.py tests/test_kernel_variants.py tests/test_lamb.py tests/test_record_classes.py tests/test_matrix_phases.py"
for impl in wgpu-native dawn; do
  RLX_GPU_IMPLEMENTATION=$impl timeout 200 python -m pytest -q -p no:cacheprovider -n 12 $T > $OUT/tests_$impl.txt 2>&1; echo "$impl: $(tail -n 1 $OUT/tests_$impl.txt)"
done
timeout 130 python -u benchmarks/kernel_variants.py --optimizers lamb,mars,adafactor --precisions bf16,f16,fp32 --variants default,-ptloads,-recip,+f16round --budget-s 100 --json $OUT/kv_defaults.json > $OUT/kv_defaults.txt 2>&1; tail -n 12 $OUT/kv_defaults.txt
timeout 100 python3 -u benchmarks/host_bench.py --rounds 5 --steps 200 --json $OUT/host_bench.json > $OUT/host_bench.txt 2>&1; grep -E "tensors" $OUT/host_bench.txt | head -12
