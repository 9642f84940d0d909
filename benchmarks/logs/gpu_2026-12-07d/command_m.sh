#!/bin/bash
# session 2026-12-07 (fourth), command M: after command K, the masked QREDUX branch removed (slower, and the 4-bit
# variant with QREDUX and QFULL off failed on NVIDIA with it): the quantized variants' bit tests on NVIDIA again,
# both implementations (the list with vlogi and lineari; last session's command J), and q_bmax, vlogi and lineari
# alone. Ran on an H100 (all passed: logs beside it).
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card_m.txt
t() { local tag=$1 s=$2; shift 2; timeout $s python3 -m pytest -q "$@" > $OUT/tests_$tag.txt 2>&1; echo "$tag: $(tail -n 1 $OUT/tests_$tag.txt)"; grep -E "^E  .*(param|state of|differ)|^FAILED" $OUT/tests_$tag.txt | head -n 8; }
t alone 40 tests/test_qbmax.py tests/test_qclosed.py -k "qbmax or vlog or linear"
t kv 100 tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)"
RLX_GPU_IMPLEMENTATION=dawn t kv_dawn 120 tests/test_kernel_variants.py -k "state_bits and (float32 or bfloat16)"
RLX_GPU_IMPLEMENTATION=dawn t alone_dawn 30 tests/test_qbmax.py tests/test_qclosed.py -k "qbmax or vlog or linear"
