#!/bin/bash
# session 2026-12-02c, command C: the new defaults (householder.PANEL 1024, Adafactor.CSCALE on): their tests, then
# SOAP against pytorch_optimizer (float32) and SOAP/Kron float16 on Dawn's tensor cores
source .gl/gpu_env.sh || exit 1
timeout 100 python -m pytest -q -p no:cacheprovider -n 12 tests/test_adafactor_switches.py tests/test_reference.py tests/test_factor.py tests/test_soap.py > $OUT/tests_defaults.txt 2>&1; echo "defaults: $(tail -n 1 $OUT/tests_defaults.txt)"
timeout 230 python3 -u benchmarks/matrix_h200.py --only soap,dawn_f16 --total 220 > $OUT/matrix_h200.txt 2>&1; tail -n 30 $OUT/matrix_h200.txt
