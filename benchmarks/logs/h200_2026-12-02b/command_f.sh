#!/bin/bash
# session 2026-12-02b, command F: SOAP f16 on Dawn's tensor cores with householder.WIDE 0 and 128 (alternating)
source .gl/gpu_env.sh || exit 1
for w in 0 128 0 128; do
  RLX_GPU_IMPLEMENTATION=dawn timeout 70 python3 -c "
import runpy, sys
sys.argv = ['precond_bench.py', '--only', 'soap', '--matmul-dtypes', 'float16', '--no-baseline', '--budget', '12']
sys.path.insert(0, 'benchmarks')
import rlx_gpu.linalg.householder as h
h.WIDE = $w
runpy.run_path('benchmarks/precond_bench.py', run_name='__main__')" > $OUT/soap_dawn_w$w.txt 2>&1
  echo "WIDE=$w: $(grep -E ' ms$' $OUT/soap_dawn_w$w.txt | tr '\n' ';')"
done
