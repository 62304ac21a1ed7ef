#!/usr/bin/env bash
# budget: 190
# solkit model on the H200 (issue 21), the vision model: Hugging Face ResNetForImageClassification (ResNet-50: the
# `50` preset, microsoft/resnet-50's config), batch 64, 224 x 224, bf16, train_step (AdamW, as PyTorch makes it):
#  1. eager twice, in separate processes, each profiling STEPS (5) steps;
#  2. torch.compile twice (the first fills the Inductor cache the second reads).
# Then the summary (benchmarks/gpu_jobs/model_runs.py, as model_llama.sh's): attributed share, sum of T_SOL vs
# measured, measured vs wall, the ranked top-5 of each run with ties, the stability of each pair
# (solkit.model.ranking.top_stability), and the FLOPs of three convolutions counted by hand in each run. Each run
# writes results.json (+ report.html) under $OUT/<run>/; the summary goes to $OUT/summary.json and the log. One
# failing part does not stop the others; parts that no longer fit the budget are skipped and say so.
#   bash benchmarks/gpu_jobs/run_round.sh model_vision
# A dry run on a CPU (the `tiny` preset, batch 2, fp32, 2 steps; every part and the summary, 2 minutes on 2 cores):
#   OUT=/tmp/model_vision VISION_DEVICE=cpu BUDGET=600 bash benchmarks/gpu_jobs/model_vision.sh
set -u
OUT=${OUT:?OUT must be set}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor_model_vision}
STEPS=${STEPS:-5}  # profiled steps per run (eager ResNet-50 at batch 64: about 60 ms of wall each)
RESNET=(--hf resnet --preset 50 --batch 64 --dtype bf16 --mode train_step --top 10 --steps "$STEPS")
SCALE=1  # the parts' time limits are multiplied by it (the CPU's compile is slower)
if [ "${VISION_DEVICE:-cuda}" = cpu ]; then
  RESNET=(--hf resnet --preset tiny --batch 2 --dtype fp32 --device cpu --mode train_step --top 10 --steps 2)
  SCALE=4
fi
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # run_left NAME SECONDS ARGS...
DEADLINE=$(( $(date +%s) + ${BUDGET:-190} ))
run_left resnet50_eager_1 $(( 35 * SCALE )) "${RESNET[@]}"
run_left resnet50_eager_2 $(( 30 * SCALE )) "${RESNET[@]}"
run_left resnet50_compile_1 $(( 90 * SCALE )) "${RESNET[@]}" --compile
run_left resnet50_compile_2 $(( 40 * SCALE )) "${RESNET[@]}" --compile
python3 benchmarks/gpu_jobs/model_runs.py model_vision "$OUT" resnet50_eager_1 resnet50_eager_2 resnet50_compile_1 \
  resnet50_compile_2 --pair resnet50_eager_1:resnet50_eager_2 --pair resnet50_compile_1:resnet50_compile_2
