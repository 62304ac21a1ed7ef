#!/usr/bin/env bash
# budget: 590
# The whole GPU test suite (pytest -m gpu over tests/ and lab/tests/); logs in $OUT/gpu_tests_*.txt.
#   bash benchmarks/gpu_jobs/run_round.sh gpu_tests
# The kernel tests are mostly Triton compilation, which is CPU-bound: three pytest processes share the
# GPU for them (correctness only). The timing, harness, tuner and bench tests run afterwards on a
# quiet GPU, since some of them compare timings.
set -u
{
  echo "# gpu_tests: $(date -u +%FT%TZ)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
} >"$OUT/gpu_tests_env.txt" 2>&1
run() {  # name, pytest args...
  local name=$1; shift
  python3 -m pytest -q -m gpu -p no:cacheprovider -rfE "$@" >"$OUT/gpu_tests_$name.txt" 2>&1
  echo "$name rc=$? $(tail -n 1 "$OUT/gpu_tests_$name.txt")"
}
run gemm tests/kernels/gemm lab/tests/test_gemm_decode_gluon.py lab/tests/test_gemm_streamk.py &
run rows tests/kernels/softmax tests/kernels/cross_entropy lab/tests/test_softmax_coop.py \
  lab/tests/test_softmax_reread.py lab/tests/test_softmax_gluon.py &
run norms tests/kernels/norms tests/kernels/rope tests/kernels/gates tests/kernels/common tests/kernels/test_paths.py &
run attention tests/kernels/attention tests/kernels/embedding tests/kernels/test_custom_ops.py &
wait
run rest tests --ignore=tests/kernels
grep -h "passed\|failed\|error" "$OUT"/gpu_tests_*.txt | grep -v "^E " | tail -n 8
