#!/usr/bin/env bash
# budget: 220
# solkit model on the H200 (issue 21), one job: Hugging Face LlamaForCausalLM at Llama-3-8B shapes, 4 layers, 8192
# tokens (batch 1 x 8192), bf16, train_step (AdamW):
#  1. eager twice, in separate processes, each profiling STEPS (5) steps (operators ranked by median time lost over them,
#     with min-max spread and ties);
#  2. `solkit model-check` on the first eager run: every distinct GEMM timed by the bench's protocol sustained (back
#     to back, as `solkit bench`) and burst (idle gaps at the step's GEMM duty: the goal's comparison), with the SM
#     clock and power of the step and of each bench row;
#  3. torch.compile twice (the first fills the Inductor cache the second reads);
#  4. ResNet-50 (batch 64, 224 x 224, bf16, train_step, eager) with conv FLOPs checked by hand, if time is left.
# Then the summary: attributed share, sum of T_SOL vs measured, measured vs wall, the ranked top-5 of each run with
# ties, the stability of each pair (solkit.model.ranking.top_stability: equal up to ties measured within each run),
# the GEMM check in both timings. Each run writes results.json (+ report.html; figures only where matplotlib is
# installed) under $OUT/<run>/; the summary goes to $OUT/summary.json and the log. One failing part does not stop
# the others; parts that no longer fit the budget are skipped and say so.
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
run_left resnet50_eager 38 --hf resnet --preset 50 --batch 64 --dtype bf16 --mode train_step --top 10 --steps "$STEPS"
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path

sys.path.insert(0, "benchmarks/gpu_jobs")
from model_runs import each_results, job_summary

out = Path(sys.argv[1])
summary = job_summary("model_llama", stability={})
rankings = {}
f3 = lambda v: "-" if v is None else f"{v:.3f}"


def one_run(run, d):
    s, m = d["summary"], d["meta"]
    rankings[run] = s.get("ranking") or []
    r = summary["runs"][run] = {"summary": {k: v for k, v in s.items() if k != "ranking"}, "device": m["device"],
                                "date": m["date"], "versions": m["versions"], "command": m.get("command"),
                                "steps_measured_ms": m.get("steps_measured_ms"), "steps_wall_ms": m.get("steps_wall_ms"),
                                "telemetry": m.get("telemetry"), "notes": m.get("notes"),
                                "top10": [{k: o.get(k) for k in ("name", "category", "calls", "time_ms", "t_sol_ms",
                                           "sol_fraction", "lost_ms_median", "lost_ms_min", "lost_ms_max", "rank_label")}
                                          for o in d["ops"][:10]],
                                "categories": [{k: g[k] for k in ("name", "time_ms", "t_sol_ms", "sol_fraction",
                                                "lost_ms")} for g in d["categories"]]}
    print(f"== {run}: {m['model']} on {m['device'].get('name')} ({m['date']}), {s.get('steps_profiled')} steps")
    print(f"   measured {s['measured_ms']:.2f} ms (wall {s['wall_ms']:.2f}; measured <= wall: {s.get('measured_le_wall')}); "
          f"steps measured {[round(x, 2) for x in m.get('steps_measured_ms') or []]}")
    print(f"   sum T_SOL {s['t_sol_ms']:.2f} ms; step SOL {s['step_sol']:.3f}; sum T_SOL <= measured: "
          f"{s['sum_t_sol_le_measured']}; attributed {s['attributed_share']:.2%} (goal 95 %); analysis overhead "
          f"{s['analysis_overhead_s']:.1f} s (goal: one step + 30 s)")
    for o in d["ops"][:6]:
        print(f"   {o['rank_label']:>3} {o['name'][:70]:70s} [{o['category']}] lost {f3(o['lost_ms_median'])} ms "
              f"({f3(o['lost_ms_min'])}-{f3(o['lost_ms_max'])}), T_SOL {f3(o['t_sol_ms'])}, SOL {f3(o['sol_fraction'])}")
    if run.startswith("resnet"):
        checks = []
        for o in [o for o in d["ops"] if o["name"].startswith("convolution ") and o["out_shape"]][:3]:
            (n, cin, _, _), (cout, _, kh, kw) = [tuple(int(x) for x in t.strip("[]").split(",")) for t in
                                                  o["shapes"].split(" x ")[:2]]
            hand = 2 * n * cout * o["out_shape"][2] * o["out_shape"][3] * cin * kh * kw * o["calls"]
            checks.append({"op": o["name"], "out": o["out_shape"], "flops": o["flops"], "by_hand": hand,
                           "equal": o["flops"] == hand})
            print(f"   conv check {o['name']}: counted {o['flops']:.6g}, by hand {hand:.6g}, equal {o['flops'] == hand}")
        r["conv_checks"] = checks


each_results(out, ("llama_eager_1", "llama_eager_2", "llama_compile_1", "llama_compile_2", "resnet50_eager"), one_run)
try:
    from solkit.model.ranking import top_stability

    for a, b in (("llama_eager_1", "llama_eager_2"), ("llama_compile_1", "llama_compile_2")):
        if rankings.get(a) and rankings.get(b):
            st = summary["stability"][a[:-2]] = top_stability(rankings[a], rankings[b], 5)
            print(f"top-5 {a[:-2]}: STABLE {st['stable']} (same order {st['same_order']}, same set {st['same_set']}); "
                  f"swapped {st['swapped']} (not tied: {st['swapped_not_tied']}); reordered not tied "
                  f"{st['reordered_not_tied']}")
except Exception as exc:
    print(f"stability: failed: {type(exc).__name__}: {exc}")
try:
    chk = out / "check.json"
    if chk.exists() and chk.stat().st_size:
        c = json.loads(chk.read_text())
        summary["check_meta"] = c["meta"]
        for run in c["runs"]:
            s = run["summary"]
            summary["gemm_check"] = {"summary": s, "rows": run["rows"]}
            print(f"== model-check of {run['results']} (duty {f3(s.get('duty'))}, judged on {s.get('judged_on')})")
            for label, b, lay in (("sustained", "bench", "layout"), ("burst", "bench_burst", "layout_burst")):
                print(f"   {label}: gemm_bf16 within 5 % {s[b]['within']}/{s[b]['compared']} (worst {f3(s[b]['worst_ratio'])}), "
                      f"layout {s[lay]['within']}/{s[lay]['compared']} (worst {f3(s[lay]['worst_ratio'])}); "
                      f"T_SOL agrees {s['t_sol_agrees']}")
            for x in run["rows"]:
                b, bb = x.get("bench") or {}, x.get("bench_burst") or {}
                mhz = lambda r: (r.get("clock") or {}).get("sm_clock_mhz")
                pw = lambda r: (r.get("clock") or {}).get("power_w")
                print(f"   {x['name'][:52]:52s} x{x['calls']:<2} model {x['model_ms_per_call']:.3f} ms SOL {f3(x['model_sol'])}"
                      f" | sust {f3(b.get('ms'))} ratio {f3(x.get('ratio'))} | burst {f3(bb.get('ms'))} gap "
                      f"{f3(x.get('burst_gap_ms'))} ratio {f3(x.get('ratio_burst'))} {x.get('within_burst')} | layout "
                      f"sust {f3(x.get('layout_ratio'))} burst {f3(x.get('layout_ratio_burst'))} | MHz "
                      f"{(x.get('model_clock') or {}).get('sm_clock_mhz')}"
                      f"/{mhz(b)}/{mhz(bb)} W {pw(b)}/{pw(bb)}")
    else:
        err = out / "check_stderr.txt"
        print(f"model-check: no results ({err.read_text()[-300:] if err.exists() else 'not run'})")
except Exception as exc:
    print(f"model-check summary failed: {type(exc).__name__}: {exc}")
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(f"wrote {out / 'summary.json'}")
PY
