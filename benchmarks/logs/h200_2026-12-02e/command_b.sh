#!/bin/bash
# session 2026-12-02e, command B: what split K does to Muon (its float32 Newton-Schulz X X^T of the 768 x 3072
# matrices has 432 tiles and K = 3072, so it splits in two) and to the 4096^3 GEMM (not split), SPLIT off then on in
# back-to-back processes; then a second round of SOAP against pytorch_optimizer (float32, float16 on Dawn)
source .gl/gpu_env.sh || exit 1
for sp in False True; do
  timeout 150 python3 -c "import torch, runpy, sys; import rlx_gpu.linalg.record as r; r.SPLIT = $sp; sys.argv = ['muon_bench.py', '--json', '$OUT/muon_split$sp.json']; runpy.run_path('benchmarks/muon_bench.py', run_name='__main__')" > $OUT/muon_split$sp.txt 2>&1; tail -n 14 $OUT/muon_split$sp.txt
done
timeout 200 python3 -u benchmarks/matrix_h200.py --only soap,dawn_f16 --total 190 --out /tmp/m > $OUT/matrix_h200.txt 2>&1; tail -n 14 $OUT/matrix_h200.txt; cp /tmp/m/matrix_h200.json $OUT/
