"""Builds the old -> new map of the results move (issue 19): <topic>/<date>_<device>[_<what>].<ext>.

Run once from the repo root before `git mv`; it prints old<TAB>new lines. Dates and times come from each
file's own metadata (all runs so far are from 2026-11-30); a companion file (log, csv, pytest output) takes
the stamp of the JSON it belongs to.
"""

import json
import re
import sys
from pathlib import Path

RES = Path("benchmarks/results")
DAY = "2026-11-30"

FIXED = {
    "bench_l_h200": "bench/2026-11-30_h200_size_l",
    "bench_m_h200_partial": "bench/2026-11-30_h200_size_m_partial",
    "bench_s_cpu": "bench/2026-11-30_cpu_size_s",
    "bench_softmax_h200_s7": "bench/2026-11-30_h200_softmax",
    "harness_traces_h200": "harness/2026-11-30_h200_traces",
    "harness_h200_evaluations.json": "harness/2026-11-30_h200_evaluations.json",
    "harness_ncu_comparison.json": "harness/2026-11-30_h200_ncu_comparison.json",
    "profile_bench_hook": "profile/2026-11-30_h200_bench_hook",
    "profile_example": "profile/2026-11-30_h200_example",
    "tune_live": "tuner/2026-11-30_h200_live",
    "tune_replay": "tuner/2026-11-30_h200_replay",
    "tune_sweeps": "tuner/2026-11-30_h200_sweeps",
    "kernels_regs_ptxas_triton36.json": "codegen/2026-11-30_sm90_ptxas_regs_triton36.json",
    "sass_compare_session6_c6_triton36.json": "codegen/2026-11-30_sm90_sass_compare_triton36.json",
    "softmax_wide_diagnosis_h200_s7.json": "softmax/2026-11-30_h200_wide_diagnosis.json",
    "timing_first_row_probe_h200_s7.json": "timing/2026-11-30_h200_first_row_probe.json",
    "timing_warmup_probe_h200_s7.json": "timing/2026-11-30_h200_warmup_probe.json",
    "timing_warmup_sequence_h200_s7.json": "timing/2026-11-30_h200_warmup_sequence.json",
    "gemm_decode_gluon_h200_session6_lead14_smoke.txt": "gemm/2026-11-30_h200_decode_gluon_smoke_lead14.txt",
    "calibration_h200.json": "calibration/2026-11-30_h200.json",
}
# companion files: old name -> (json it belongs to, suffix)
COMPANION = {
    "gemm_decode_gluon_h200_s6r1.log": ("gemm_decode_gluon_h200_s6r1.json", "_log.txt"),
    "gemm_decode_gluon_h200_s6r2.log": ("gemm_decode_gluon_h200_s6r2.json", "_log.txt"),
    "gemm_decode_gluon_h200_s6r3.log": ("gemm_decode_gluon_h200_s6r3.json", "_log.txt"),
    "gemm_oproj_h200_round4_prefill_smi.csv": ("gemm_oproj_h200_round4_prefill.json", "_smi.csv"),
    "gemm_oproj_h200_round4_smi.csv": ("gemm_oproj_h200_round4.json", "_smi.csv"),
    "kernels_round4_k7a_log.txt": ("kernels_norm_round4.json", "_log.txt"),
    "kernels_round4a_k7a_log.txt": ("kernels_norm_round4a.json", "_log.txt"),
    "kernels_round4c_k7a_log.txt": ("kernels_norm_round4c.json", "_log.txt"),
    "kernels_softmax_wide_h200_s6_record_pytest.txt": ("kernels_softmax_wide_h200_s6_record.json", "_pytest.txt"),
    "kernels_softmax_wide_h200_s6r1_pytest.txt": ("kernels_softmax_wide_h200_s6r1.json", "_pytest.txt"),
    "kernels_softmax_wide_h200_s6r2_pytest.txt": ("kernels_softmax_wide_h200_s6r2.json", "_pytest.txt"),
}
# (regex on the old stem, topic, kind); first match wins
RULES = [
    (r"calibration_", "calibration", ""),
    (r"ce_probe", "cross_entropy", "probe"),
    (r"gemm_decode_gluon", "gemm", "decode_gluon"),
    (r"gemm_decode", "gemm", "decode"),
    (r"gemm_gluon_.*check", "gemm", "gluon_ws_check"),
    (r"gemm_gluon", "gemm", "gluon_ws"),
    (r"gemm_oproj.*prefill", "gemm", "oproj_prefill"),
    (r"gemm_oproj.*sweep", "gemm", "oproj_sweep"),
    (r"gemm_oproj", "gemm", "oproj"),
    (r"gemm_power", "gemm", "power"),
    (r"gemm_tuner", "gemm", "tuner_check"),
    (r"kernels_gates.*flce", "gates_rope", "flce"),
    (r"kernels_gates.*record", "gates_rope", "record"),
    (r"kernels_gates.*sweep", "gates_rope", "sweep"),
    (r"kernels_gates.*review", "gates_rope", "review"),
    (r"kernels_gates", "gates_rope", "gates"),
    (r"kernels_rope", "gates_rope", "rope"),
    (r"kernels_normbwd", "norms", "bwd"),
    (r"kernels_norm", "norms", "fwd"),
    (r"kernels_record", "record", ""),
    (r"kernels_softmax_gluon.*ws", "softmax", "gluon_ws"),
    (r"kernels_softmax_gluon", "softmax", "gluon"),
    (r"kernels_softmax_wide.*rep", "softmax", "wide_repeat"),
    (r"kernels_softmax_wide.*record", "softmax", "wide_record"),
    (r"kernels_softmax_wide", "softmax", "wide"),
    (r"read_floor", "read_floor", ""),
    (r"train_(.*)_round", "train", "llama3-8b-L8"),
]


def stamp(path: Path) -> str:
    data = json.loads(path.read_text())
    meta = data.get("meta", {}) if isinstance(data.get("meta"), dict) else {}
    for key in ("date", "date_utc", "timestamp"):
        value = data.get(key) or meta.get(key)
        if value:
            m = re.match(r"(\d{4}-\d\d-\d\d)[T ](\d\d):(\d\d)", str(value))
            if m:
                assert m.group(1) == DAY, path
                return m.group(2) + m.group(3)
    raise SystemExit(f"no date in {path}")


def new_name(name: str) -> str:
    if name in FIXED:
        return FIXED[name]
    if name in COMPANION:
        base, suffix = COMPANION[name]
        return new_name(base)[: -len(".json")] + suffix
    if name.startswith("gpu_tests_"):
        label = re.sub(r"^gpu_tests_h200_session\d_", "", name[: -len(".txt")])
        return f"gpu_tests/{DAY}_h200_{label}.txt"
    stem = name[: -len(".json")]
    for pattern, topic, kind in RULES:
        if re.match(pattern, stem):
            what = "_".join(x for x in (kind, stamp(RES / name)) if x)
            return f"{topic}/{DAY}_h200_{what}.json"
    raise SystemExit(f"no rule for {name}")


def main() -> None:
    seen = {}
    for path in sorted(RES.iterdir()):
        if path.name in ("index.yaml",) or path.name in {"bench", "calibration"}:
            continue
        new = new_name(path.name)
        assert new not in seen, (new, path.name, seen.get(new))
        seen[new] = path.name
        sys.stdout.write(f"benchmarks/results/{path.name}\tbenchmarks/results/{new}\n")


if __name__ == "__main__":
    main()
