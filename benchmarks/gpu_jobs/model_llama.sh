#!/usr/bin/env bash
# budget: 220
# solkit model on the H200 (issue 21), one job: Hugging Face LlamaForCausalLM at Llama-3-8B shapes, 4 layers, 8192
# tokens (batch 1 x 8192), bf16, train_step (AdamW):
#  1. eager twice, in separate processes, each profiling STEPS (5) steps (operators ranked by median time lost over them,
#     with min-max spread and ties);
#  2. `solkit model-check` on the first eager run: every distinct GEMM timed by the bench's protocol sustained (back
#     to back, as `solkit bench`) and burst (idle gaps at the step's GEMM duty: the goal's comparison), with the SM
#     clock and power of the step and of each bench row;
#  3. torch.compile twice (the first fills the Inductor cache the second reads).
# (The vision model, ResNet-50, is model_vision.sh.) Then the summary (benchmarks/gpu_jobs/model_runs.py): attributed
# share, sum of T_SOL vs measured, measured vs wall, the ranked top-5 of each run with ties, the stability of each
# pair (solkit.model.ranking.top_stability: equal up to ties measured within each run), the GEMM check in both
# timings, each at face value (the goal's verdict: burst) and at equal SM clocks (the ratio times the bench row's
# clock over the step's; a step clock estimated from the nearest NVML sample is marked ~). Each run writes
# results.json (+ report.html; figures only where matplotlib is installed) under $OUT/<run>/; the summary goes to
# $OUT/summary.json and the log. One failing part does not stop the others; parts that no longer fit the budget are
# skipped and say so.
#   bash benchmarks/gpu_jobs/run_round.sh model_llama
set -u
OUT=${OUT:?OUT must be set}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor_model_llama}
STEPS=${STEPS:-5}  # profiled steps per run: about 0.2 s of GPU and 0.5-1 s of profiler work each
LLAMA=(--hf llama --preset llama3-8b --layers 4 --seq 8192 --batch 1 --dtype bf16 --mode train_step --top 15
       --steps "$STEPS")
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # run NAME SECONDS ARGS...
DEADLINE=$(( $(date +%s) + ${BUDGET:-220} ))
run_left llama_eager_1 40 "${LLAMA[@]}"
run_left llama_eager_2 40 "${LLAMA[@]}"
if [ -f "$OUT/llama_eager_1/results.json" ]; then
  secs=$(left_within 80)
  if [ "$secs" -ge 15 ]; then
    start=$(date +%s)
    timeout --kill-after=3 "$secs" python3 -m solkit.cli model-check "$OUT/llama_eager_1" --reps 30 --timing both \
      --json >"$OUT/check.json" 2>"$OUT/check_stderr.txt"
    echo "model-check rc=$? wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/runs.txt"
    grep -v '^USDT' "$OUT/check_stderr.txt" | tail -n 3
  else
    echo "model-check skipped: ${secs}s left of the job's budget" | tee -a "$OUT/runs.txt"
  fi
fi
run_left llama_compile_1 75 "${LLAMA[@]}" --compile
run_left llama_compile_2 45 "${LLAMA[@]}" --compile
python3 benchmarks/gpu_jobs/model_runs.py model_llama "$OUT" llama_eager_1 llama_eager_2 llama_compile_1 \
  llama_compile_2 --pair llama_eager_1:llama_eager_2 --pair llama_compile_1:llama_compile_2 --check
