"""solkit.model: the SOL of every operator of a user's own model (fwd, fwd_bwd, train_step).

``analyze(model, example_inputs, mode=...)`` measures one step with torch.profiler, attributes each
kernel to the aten op or Inductor region that launched it, and scores each against T_SOL from the
meta-tensor analysis; ``solkit model`` is its command line.
"""

from solkit.model.analyze import analyze
from solkit.model.report import ModelReport
from solkit.model.step import MODES

__all__ = ["MODES", "ModelReport", "analyze"]
