"""solkit.timing: the timing protocol every solkit measurement uses (the ground floor: torch and stdlib only).

:func:`benchmark` is the entry point; :mod:`.core` holds the result record and the event/wall
primitives, :mod:`.graphs` the CUDA-graph methods and :mod:`.kernel` the profiler's kernel span.
"""

from solkit.timing.core import CV_WARN, L2Flusher, TimingResult, summarize
from solkit.timing.kernel import RANGE_PREFIX, spans_from_trace
from solkit.timing.protocol import (
    GRAPH_THRESHOLD_MS,
    METHODS,
    WARMUP_MAX_CALLS,
    WARMUP_MS,
    TimingMethod,
    benchmark,
    warm_for,
)

__all__ = [
    "CV_WARN",
    "GRAPH_THRESHOLD_MS",
    "METHODS",
    "RANGE_PREFIX",
    "WARMUP_MAX_CALLS",
    "WARMUP_MS",
    "L2Flusher",
    "TimingMethod",
    "TimingResult",
    "benchmark",
    "spans_from_trace",
    "summarize",
    "warm_for",
]
