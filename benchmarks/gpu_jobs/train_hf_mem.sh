#!/usr/bin/env bash
# budget: 240
# Issue 22, the short run: train_hf.sh (HF LlamaForCausalLM, Llama-3-8B shapes, 8 layers, 4 x 4096 tokens, bf16,
# AdamW, 3 warm-up + 17 timed steps, peak memory per variant) with eager, patch, liger, compile and compile+patch
# only (compile+liger left out to fit the device time; eager stays as the loss-parity reference). It checks the
# peak-memory goal (patch <= Liger) and compile+patch against compile. Results in $OUT/train_hf/.
#   bash benchmarks/gpu_jobs/run_round.sh train_hf_mem
set -u
export TRAIN_HF_VARIANTS="${TRAIN_HF_VARIANTS:-eager patch liger compile compile+patch}"
export TRAIN_HF_BUDGET="${TRAIN_HF_BUDGET:-215}"
exec bash benchmarks/gpu_jobs/train_hf.sh
