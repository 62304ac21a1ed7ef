"""Nsight Compute + NVML profiling and the optimisation advisor (``solkit profile``).

* :mod:`solkit.profile.ncu` — ncu command line, subprocess run, CSV / ncu_report parsing;
* :mod:`solkit.profile.driver` — the program profiled (one measured call per target);
* :mod:`solkit.profile.diagnose` — counters -> roof, tier, findings;
* :mod:`solkit.profile.runner` — the pipeline, graceful degradation, re-diagnosis of saved runs;
* :mod:`solkit.profile.bench_hook` — ``diagnose_for_bench`` / ``diagnose_batch_for_bench`` for ``solkit bench``;
* :mod:`solkit.profile.report` — Markdown, HTML and JSON.
"""
