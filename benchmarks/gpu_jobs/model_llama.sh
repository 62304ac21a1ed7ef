#!/usr/bin/env bash
# budget: 240
# solkit model on the H200 (issue 21): Hugging Face LlamaForCausalLM at Llama-3-8B shapes, 4 layers, 8192 tokens
# (batch 1 x 8192), bf16, train_step (AdamW), eager and torch.compile, each run twice in separate processes (is the
# top-5 by time lost stable?), then ResNet-50 (batch 64, 224 x 224, bf16, train_step, eager) with its conv FLOPs
# checked by hand on three layers. Each run writes results.json + report.html + figures under $OUT/<run>/; the
# summary (attributed share, sum of T_SOL vs measured, top-5 lists, stability, conv check) goes to
# $OUT/summary.json and the log. One failing run does not stop the others.
#   bash benchmarks/gpu_jobs/run_round.sh model_llama
set -u
OUT=${OUT:?OUT must be set}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor_model_llama}
LLAMA=(--hf llama --preset llama3-8b --layers 4 --seq 8192 --batch 1 --dtype bf16 --mode train_step --top 10)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # run NAME SECONDS ARGS...
# Within the budget (or a lower cap given as BUDGET=N): the Llama runs first, ResNet-50 (checked before) last; a part
# that no longer fits is skipped and says so.
DEADLINE=$(( $(date +%s) + ${BUDGET:-240} ))
run_left llama_eager_1 42 "${LLAMA[@]}"
run_left llama_eager_2 42 "${LLAMA[@]}"
run_left llama_compile_1 75 "${LLAMA[@]}" --compile
run_left llama_compile_2 33 "${LLAMA[@]}" --compile
run_left resnet50_eager 38 --hf resnet --preset 50 --batch 64 --dtype bf16 --mode train_step --top 10
python3 - "$OUT" <<'PY'
import json, subprocess, sys
from pathlib import Path

out = Path(sys.argv[1])
summary = {"job": "model_llama", "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
           text=True).stdout.strip() or "unknown", "runs": {}}
tops = {}
for run in ("llama_eager_1", "llama_eager_2", "llama_compile_1", "llama_compile_2", "resnet50_eager"):
    f = out / run / "results.json"
    if not f.exists():
        print(f"{run}: no results ({(out / run / 'stderr.txt').read_text()[-300:] if (out / run / 'stderr.txt').exists() else 'not run'})")
        continue
    d = json.loads(f.read_text())
    s, m = d["summary"], d["meta"]
    tops[run] = s["top5_by_time_lost"]
    summary["runs"][run] = {"summary": s, "device": m["device"], "date": m["date"], "versions": m["versions"],
                            "command": m.get("command"), "categories": [{k: g[k] for k in ("name", "time_ms", "t_sol_ms",
                            "sol_fraction", "lost_ms")} for g in d["categories"]]}
    print(f"== {run}: {m['model']} on {m['device'].get('name')} ({m['date']})")
    print(f"   measured {s['measured_ms']:.2f} ms (wall {s['wall_ms']:.2f}); sum T_SOL {s['t_sol_ms']:.2f} ms; "
          f"step SOL {s['step_sol']:.3f}; sum T_SOL <= measured: {s['sum_t_sol_le_measured']}")
    print(f"   attributed share {s['attributed_share']:.2%} (goal 95 %); analysis overhead {s['analysis_overhead_s']:.1f} s")
    for i, name in enumerate(s["top5_by_time_lost"], 1):
        op = next(o for o in d["ops"] if o["name"] == name)
        print(f"   top{i}: {name} [{op['category']}] {op['time_ms']:.3f} ms, T_SOL {op['t_sol_ms'] or 0:.3f}, "
              f"SOL {op['sol_fraction'] if op['sol_fraction'] is not None else '-'}, lost {op['lost_ms']:.3f} ms")
    gemms = [o for o in d["ops"] if o["name"].split()[0] in ("mm", "addmm", "bmm") and o["sol_fraction"] is not None]
    summary["runs"][run]["gemms"] = [{k: o[k] for k in ("name", "calls", "time_ms", "t_sol_ms", "sol_fraction")}
                                     for o in gemms]
    if run.startswith("resnet"):
        checks = []
        for o in [o for o in d["ops"] if o["name"].startswith("convolution ") and o["out_shape"]][:3]:
            (n, cin, _, _), (cout, _, kh, kw) = [tuple(int(x) for x in s.strip("[]").split(",")) for s in
                                                  o["shapes"].split(" x ")[:2]]
            ho, wo = o["out_shape"][2], o["out_shape"][3]
            hand = 2 * n * cout * ho * wo * cin * kh * kw * o["calls"]
            checks.append({"op": o["name"], "out": o["out_shape"], "flops": o["flops"], "by_hand": hand,
                           "equal": o["flops"] == hand})
            print(f"   conv check {o['name']} -> {o['out_shape']}: counted {o['flops']:.6g}, by hand {hand:.6g}, "
                  f"equal {o['flops'] == hand}")
        summary["runs"][run]["conv_checks"] = checks
for a, b in (("llama_eager_1", "llama_eager_2"), ("llama_compile_1", "llama_compile_2")):
    if a in tops and b in tops:
        same = tops[a] == tops[b]
        summary[f"top5_stable_{a[:-2]}"] = {"same_order": same, "same_set": set(tops[a]) == set(tops[b])}
        print(f"top-5 stable {a[:-2]}: same order {same}, same set {set(tops[a]) == set(tops[b])}")
(out / "summary.json").write_text(json.dumps(summary, indent=1))
PY
