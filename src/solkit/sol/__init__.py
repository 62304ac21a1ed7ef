"""solkit.sol: the speed-of-light model, its ceilings and tiers, and automatic FLOP/byte analysis.

* :mod:`solkit.sol.model`: T_SOL, SOL fraction, anchored score, MFU (pure functions);
* :mod:`solkit.sol.ceilings`: datasheet (``spec``) and measured (``calibrated``) ceilings;
* :mod:`solkit.sol.tiers`: the seed's guidance tiers;
* :mod:`solkit.sol.analysis`: trace a PyTorch reference on meta tensors and count its work.
"""

from solkit.sol.model import Ceilings, SolResult, anchored_score, mfu, sol_fraction, t_sol

__all__ = ["Ceilings", "SolResult", "anchored_score", "mfu", "sol_fraction", "t_sol", "analyze", "analyze_problem"]


def __getattr__(name: str):
    # The analysis imports torch's tracing machinery; load it only when asked for.
    if name in ("analyze", "analyze_problem", "analyze_workload", "ShapeSpec"):
        from solkit.sol import analysis

        return getattr(analysis, name)
    raise AttributeError(name)
