#!/bin/bash
# session 2026-12-06 (third), command A: the quantized rows with FULL's unmasked unit in their subgroup driver
# (QFULL: +qfull; the default stays the driver before) and 8-bit's "min" and "binade" closed forms (+qmin, +qbin), x-search as the ceiling,
# torch's fused AdamW and bitsandbytes' AdamW8bit beside; LAMB float16 with unpack4_f16 in vector operations
# (default now; -hvec: four scalar h2f calls, as before); wgpu-native, then Dawn's 8-bit row
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card.txt
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|Error|error|FAILED" $OUT/kv_$tag.txt | head -n 40; }
# the new code's bit tests on NVIDIA's compiler first (both implementations): the closed forms' sweep, every
# float16 widened, the quantized drivers' variants (FULL's unmasked unit, the new forms) against the plain driver
T="tests/test_qclosed.py tests/test_lowp_wgsl.py tests/test_kernel_variants.py"
timeout 90 python3 -m pytest -q $T -k "min or binade or lowp or (state_bits and float32)" > $OUT/tests_wgpu.txt 2>&1; tail -n 2 $OUT/tests_wgpu.txt
RLX_GPU_IMPLEMENTATION=dawn timeout 60 python3 -m pytest -q $T -k "min or binade or lowp or (state_bits and float32)" > $OUT/tests_dawn.txt 2>&1; tail -n 2 $OUT/tests_dawn.txt
kv q8 170 --optimizers adamw8bit,adamw4bit --precisions fp32,bf16 --variants default,+qfull,+qmin,+qbin,x-search --budget-s 130
kv lamb16 40 --optimizers lamb --precisions f16 --variants default,-hvec --budget-s 20
RLX_GPU_IMPLEMENTATION=dawn kv dawnq8 60 --optimizers adamw8bit --precisions fp32 --variants default,+qfull,+qmin,+qbin --budget-s 35
for f in $OUT/kv_*.txt; do echo "== $f"; sed -n '/^optimizer/,$p' $f | awk '{print $1, $2, $4, $(NF-3), $(NF-1), $NF}'; sed -n '/^optimizer/,$p' $f | cut -c1-60; done
