#!/bin/bash
# session 2026-12-06 (second), command B: where issue 25's kernel targets stand on this card (wgpu-native), every
# row at its default (the f16 rows' WIDE-off/FULL-on defaults of PERF_NOTES 54 were never timed), torch's
# fused/foreach step and bitsandbytes' AdamW8bit beside: the elementwise 16-bit rows, LAMB and MARS in 16-bit, the
# quantized rows, AdamW fp32 and bf16-master as the control
source .gl/gpu_env.sh || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card.txt
kv() { local tag=$1 t=$2; shift 2; timeout $t python3 -u benchmarks/kernel_variants.py --variants default "$@" --json $OUT/kv_$tag.json > $OUT/kv_$tag.txt 2>&1; grep -E "of copy|left out|Error|error" $OUT/kv_$tag.txt | head -n 30; }
kv elementwise16 230 --optimizers adamw,adam,sgd,rmsprop,adagrad,nadamw,radam,qhadamw,lion,sophiah --precisions bf16,f16 --budget-s 175
kv reducing16 70 --optimizers lamb,mars --precisions bf16,f16 --budget-s 45
kv quantized 75 --optimizers adamw8bit,adamw4bit --precisions fp32,bf16 --budget-s 50
kv control 40 --optimizers adamw --precisions fp32,bf16-master --budget-s 20
for f in $OUT/kv_*.txt; do echo "== $f"; sed -n '/^optimizer/,$p' $f | awk '{print $1, $2, $4, $(NF-3), $(NF-1), $NF}'; done
