#!/usr/bin/env bash
# budget: 100
# Issue 21's last goal on the H200: do the per-GEMM SOL fractions of `solkit model` agree within 5 % with `solkit
# bench` at the same shapes? HF LlamaForCausalLM at Llama-3-8B shapes, 4 layers, 1 x 8192 tokens, bf16, train_step,
# eager then torch.compile (`solkit model --html`), then `solkit model-check` on both runs in one process: every
# distinct GEMM call (shapes, operand layouts, dtype) is timed once through the bench's per-workload protocol on the
# model runs' ceilings, as the suite's gemm_bf16 on the vendor backend and as the model's own call (its layouts,
# eager). The comparison lands in each run's results.json (`bench_check`) and report.html, the check's JSON (device,
# date, versions, command) in $OUT/check.json, the per-GEMM table in the log and $OUT/summary.json. The SM clock and
# power are sampled (NVML) in the step and in each bench row, for the ratio at equal clocks. One failing part does
# not stop the others; a check cut short keeps the runs it finished (written into their results.json).
# model-check times every GEMM sustained (back to back) and burst (idle gaps at the step's GEMM duty, the goal's
# comparison); model_llama.sh runs the same check on its first eager run, so this job is only needed on its own.
#   bash benchmarks/gpu_jobs/run_round.sh model_gemm_check
set -u
OUT=${OUT:?OUT must be set}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor_model_llama}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # run NAME SECONDS ARGS...
LLAMA=(--hf llama --preset llama3-8b --layers 4 --seq 8192 --batch 1 --dtype bf16 --mode train_step --top 10)
DEADLINE=$(( $(date +%s) + ${BUDGET:-100} ))  # BUDGET: run_round.sh's cap, when it gives one
RESERVE=30 run_left llama_eager 26 "${LLAMA[@]}"  # the check of the eager run must still fit after each run
RESERVE=30 run_left llama_compile 40 "${LLAMA[@]}" --compile
checked=()
for r in llama_eager llama_compile; do [ -f "$OUT/$r/results.json" ] && checked+=("$OUT/$r"); done
if [ ${#checked[@]} -gt 0 ]; then
  start=$(date +%s)
  timeout --kill-after=3 "$(left_within 40)" python3 -m solkit.cli model-check "${checked[@]}" --json >"$OUT/check.json" 2>"$OUT/check_stderr.txt"
  echo "model-check rc=$? wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/runs.txt"
  grep -v '^USDT' "$OUT/check_stderr.txt" | tail -n 3
fi
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path

sys.path.insert(0, "benchmarks/gpu_jobs")
from model_runs import each_results, job_summary

out = Path(sys.argv[1])
summary = job_summary("model_gemm_check")

def one_run(run, d):
    s, m, c = d["summary"], d["meta"], d.get("bench_check")
    r = {"device": m["device"], "date": m["date"], "versions": m["versions"], "command": m.get("command"),
         "summary": s, "gemms": len(d.get("gemms", [])), "bench_check": c}
    summary["runs"][run] = r
    print(f"== {run}: {m['model']} on {m['device'].get('name')} ({m['date']})")
    print(f"   measured {s['measured_ms']:.2f} ms (wall {s['wall_ms']:.2f}, measured <= wall: {s.get('measured_le_wall')}); "
          f"step SOL {s['step_sol']:.3f}; attributed {s['attributed_share']:.2%}")
    print(f"   device events: {m.get('device_events')}")
    tel = m.get("telemetry") or {}
    print(f"   step telemetry: SM clock {tel.get('sm_clock_mhz')}, power {tel.get('power_w')}, "
          f"reasons {tel.get('throttle_reasons')}, samples {tel.get('n_samples')}")
    top5 = [o["name"][:50] for o in d["ops"][:5]]
    print(f"   top-5 by time lost: {top5}")
    if not c:
        print(f"   no bench_check ({len(d.get('gemms', []))} GEMMs recorded)")
        return
    cs = c["summary"]
    print(f"   GEMMs within {c['tolerance']:.0%} of solkit bench: gemm_bf16 vendor {cs['bench']['within']}/"
          f"{cs['bench']['compared']} (worst {cs['bench']['worst_ratio']}), model's layout {cs['layout']['within']}/"
          f"{cs['layout']['compared']} (worst {cs['layout']['worst_ratio']}); T_SOL agrees: {cs['t_sol_agrees']}")
    pb, pl = cs.get("bench_per_clock") or {}, cs.get("layout_per_clock") or {}
    print(f"   at equal SM clocks: gemm_bf16 {pb.get('within')}/{pb.get('compared')} (worst {pb.get('worst_ratio')}), "
          f"layout {pl.get('within')}/{pl.get('compared')} (worst {pl.get('worst_ratio')})")
    for x in c["rows"]:
        b, lay = x["bench"] or {}, x["layout_run"] or {}
        f3 = lambda v: "-" if v is None else f"{v:.3f}"
        print(f"   {x['name'][:60]:60s} x{x['calls']:<2} model {x['model_ms_per_call']:.3f} ms SOL {f3(x['model_sol'])} | "
              f"bench {f3(b.get('ms'))} ms SOL {f3(b.get('sol_raw'))} ratio {f3(x['ratio'])} {x['within']} | "
              f"layout {f3(lay.get('ms'))} ms SOL {f3(lay.get('sol_raw'))} ratio {f3(x['layout_ratio'])} {x['layout_within']} | "
              f"MHz {(x.get('model_clock') or {}).get('sm_clock_mhz')}/{(b.get('clock') or {}).get('sm_clock_mhz')}/"
              f"{(lay.get('clock') or {}).get('sm_clock_mhz')} per-clock {f3(x.get('ratio_per_clock'))} "
              f"{f3(x.get('layout_ratio_per_clock'))}"
              + ("" if b.get("status", "ok") == "ok" else f" bench {b.get('status')}: {b.get('error')}"))


each_results(out, ("llama_eager", "llama_compile"), one_run)
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(f"wrote {out / 'summary.json'}")
PY
