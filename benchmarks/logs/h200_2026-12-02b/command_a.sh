#!/bin/bash
# session 2026-12-02b, command A: the bit tests of the new switches on the H200, Adafactor's and LAMB/MARS's splits
source .gl/gpu_env.sh || exit 1
timeout 150 python -m pytest -q -p no:cacheprovider -n 12 tests/test_adafactor_switches.py tests/test_factor.py > $OUT/bits.txt 2>&1; tail -2 $OUT/bits.txt
timeout 90 python -m pytest -q -p no:cacheprovider -n 12 tests/test_kernel_variants.py -k "f16round or ptloads or recip" > $OUT/bits2.txt 2>&1; tail -2 $OUT/bits2.txt
timeout -s INT 80 python -u benchmarks/adafactor_passes.py --precisions bf16,f16,fp32 --variants default,+recip,+ptloads,+recip+ptloads --budget-s 50 --json $OUT/ada6_passes.json > $OUT/ada6_passes.txt 2>&1; grep -E "whole step|^  (rowcols|update_norm|ratio|apply) |left out|FAILED|Error" $OUT/ada6_passes.txt
timeout 85 python -u benchmarks/reducing_passes.py --precisions f16,bf16,fp32 --budget-s 50 --json $OUT/rp_kern6.json > $OUT/rp_kern6.txt 2>&1; tail -40 $OUT/rp_kern6.txt
timeout 55 python -u benchmarks/kernel_variants.py --optimizers lamb --precisions f16 --variants default,+f16round --budget-s 20 --json $OUT/kv_kern6.json > $OUT/kv_kern6.txt 2>&1; tail -6 $OUT/kv_kern6.txt
