"""solkit.testing: solkit where Triton and pytest users already work.

* :func:`do_bench`: Triton's ``triton.testing.do_bench`` signature and return semantics over solkit's
  timing protocol; usable as ``triton.autotune(..., do_bench=solkit.testing.do_bench)``;
* :func:`measure` / :class:`SolRecord`: time a callable and score it against T_SOL (what the pytest
  ``sol`` fixture of :mod:`solkit.testing.plugin` calls).

Importing this package is cheap (pytest imports the plugin module in every run): torch and the SOL
model load only when a timer or a measurement is called.
"""

from solkit.testing.bench import do_bench, quantiles_of

__all__ = ["SolRecord", "do_bench", "measure", "quantiles_of"]


def __getattr__(name: str):
    if name in ("measure", "SolRecord"):
        from solkit.testing import scoring

        return getattr(scoring, name)
    raise AttributeError(name)
