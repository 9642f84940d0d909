#!/bin/bash
# session 2026-12-06 (third), command B (an H200 only: the figures are the H200's; the H100's were taken in
# the second session): where the 16-bit elementwise rows and LAMB/MARS stand there now, at their defaults
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card.txt
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|Error|error|FAILED" $OUT/kv_$tag.txt | head -n 40; }
kv elementwise16 240 --optimizers adamw,adam,sgd,rmsprop,adagrad,nadamw,radam,qhadamw,lion,sophiah --precisions bf16,f16 --variants default --budget-s 190
kv reducing16 70 --optimizers lamb,mars --precisions bf16,f16 --variants default,-hvec --budget-s 45
kv control 40 --optimizers adamw --precisions fp32 --variants default --budget-s 20
timeout 150 python3 benchmarks/host_bench.py --rounds 5 --steps 200 --json $OUT/host_bench.json > $OUT/host_bench.txt 2>&1; tail -n 14 $OUT/host_bench.txt
for f in $OUT/kv_*.txt; do echo "== $f"; sed -n '/^optimizer/,$p' $f | cut -c1-60; done
