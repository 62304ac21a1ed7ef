# budget: 60
# Issue 6, config selection: the GEMM tunes through solkit.tune.autotune (first call per shape), a second
# process reads the winners from the persisted cache without timing, steady-state calls make no host
# sync, CUDA graph capture/replay of the tuned GEMM (and of a key first met inside a capture), and
# triton.autotune's picks timed against solkit.tune's with the harness protocol. Cold Triton cache.
set -u
export TRITON_CACHE_DIR=/tmp/k6t_triton_cache
rm -rf "$TRITON_CACHE_DIR"
python3 benchmarks/gemm_tuner_check.py --out "$OUT" 2>&1 | tail -n 40
echo "check rc=${PIPESTATUS[0]}"
timeout 15 python3 -m pytest tests/kernels/test_gemm_tuner.py -q -x -m gpu -p no:cacheprovider 2>&1 | tail -n 8 | tee "$OUT/pytest_gpu.txt"
