#!/bin/bash
# session 2026-12-07 (third), command J (QREDUX and QHOIST the defaults; QPREFETCH removed after commands H and I):
# the quantized tests on NVIDIA's compiler, both implementations (Dawn's failure in H and I was the variant with
# QPREFETCH and QREDUX without QFULL: the list now has QREDUX without QFULL alone). (Trimmed to these: the device
# budget had ~500 s left after refused starts; command I's +qhoist rows are the status with both on.)
# NOT RUN: every start after command I was refused or failed (about 600 s of budget); ready for the next session.
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
t() { local tag=$1 s=$2; shift 2; timeout $s python3 -m pytest -q "$@" > $OUT/tests_$tag.txt 2>&1; echo "$tag: $(tail -n 1 $OUT/tests_$tag.txt)"; grep -E "^E  .*(param|state of)|^FAILED" $OUT/tests_$tag.txt | head -n 8; }
t kv 100 tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)"
RLX_GPU_IMPLEMENTATION=dawn t kv_dawn 100 tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)"
RLX_GPU_IMPLEMENTATION=dawn t q_dawn 60 tests/test_quantized_edges.py
