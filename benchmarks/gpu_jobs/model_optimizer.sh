#!/usr/bin/env bash
# budget: 150
# solkit model's optimizer accounting and --what-if on the H200: HF LlamaForCausalLM at Llama-3-8B shapes, 2 layers,
# 2048 tokens, bf16, train_step with AdamW as PyTorch makes it (multi-tensor _foreach on CUDA), fused and the
# per-tensor loop; the first run also puts every operator on an A100, a B200 and an RTX 4090 (--what-if). For each
# run: does every optimizer kernel (multi_tensor_apply_kernel, the fused AdamW kernel) reach an op with a T_SOL
# (optimizer time with a T_SOL / optimizer time), the optimizer's SOL fraction, the attributed share; the what-if
# step sums. Results: $OUT/<run>/results.json + report.html, $OUT/summary.json. One failing run does not stop the
# others.
#   bash benchmarks/gpu_jobs/run_round.sh model_optimizer
set -u
OUT=${OUT:?OUT must be set}
LLAMA=(--hf llama --preset llama3-8b --layers 2 --seq 2048 --batch 1 --dtype bf16 --mode train_step --top 2000)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # run NAME SECONDS ARGS...
run adamw_default 45 "${LLAMA[@]}" --optimizer default --what-if a100-sxm4-80gb,b200,rtx-4090
run adamw_fused 35 "${LLAMA[@]}" --optimizer fused
run adamw_for_loop 45 "${LLAMA[@]}" --optimizer for-loop
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path

sys.path.insert(0, "benchmarks/gpu_jobs")
from model_runs import each_results, job_summary

out = Path(sys.argv[1])
summary = job_summary("model_optimizer")

def one_run(run, d):
    s, m = d["summary"], d["meta"]
    opt = [o for o in d["ops"] if o["category"] == "optimizer"]
    t_opt = sum(o["time_ms"] for o in opt)
    t_sol = sum(o["time_ms"] for o in opt if o["t_sol_ms"] is not None)
    cat = next((g for g in d["categories"] if g["name"] == "optimizer"), {})
    r = {"device": m["device"], "date": m["date"], "versions": m["versions"], "command": m.get("command"),
         "optimizer": m.get("optimizer"), "precision": m.get("precision"), "summary": s,
         "optimizer_ms": t_opt, "optimizer_with_t_sol_share": t_sol / t_opt if t_opt else None,
         "optimizer_sol_fraction": cat.get("sol_fraction"), "optimizer_t_sol_ms": cat.get("t_sol_ms"),
         "optimizer_ops": [{k: o[k] for k in ("name", "calls", "time_ms", "t_sol_ms", "sol_fraction", "bytes")}
                           for o in opt],
         "what_if": d.get("what_if")}
    summary["runs"][run] = r
    print(f"== {run}: {m['optimizer']} on {m['device'].get('name')} ({m['date']}), precision {m.get('precision')}")
    print(f"   measured {s['measured_ms']:.2f} ms; step SOL {s['step_sol']:.3f}; attributed {s['attributed_share']:.2%}")
    share = f"{t_sol / t_opt:.2%}" if t_opt else "-"
    print(f"   optimizer {t_opt:.3f} ms in {sum(o['calls'] for o in opt)} calls; with a T_SOL: {share}; "
          f"SOL {cat.get('sol_fraction')}")
    for o in sorted(opt, key=lambda o: -o["time_ms"])[:6]:
        print(f"     {o['name'][:70]} x{o['calls']} {o['time_ms']:.3f} ms T_SOL {o['t_sol_ms']} SOL {o['sol_fraction']}")
    for p, c in (d.get("what_if") or {}).get("step", {}).items():
        print(f"   what-if {p}: sum T_SOL {c['t_sol_ms']:.3f} ms ({c['vs_here']:.3f} x here), "
              f"{c['unavailable_calls']} calls unavailable")


each_results(out, ("adamw_default", "adamw_fused", "adamw_for_loop"), one_run)
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(f"wrote {out / 'summary.json'}")
PY
