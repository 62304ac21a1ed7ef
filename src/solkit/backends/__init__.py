"""solkit.backends: every implementation ``solkit bench`` measures, as a registry of solutions per problem.

:mod:`.registry` holds the backends (eager, compile, vendor, liger, solkit and the rivals); :mod:`.liger` is
the one home of the Liger-Kernel calls (also used by ``solkit train``); :mod:`.sdpa` (SDPA with one backend
forced), :mod:`.cudnn_attention` (the cuDNN frontend's fused attention) and :mod:`.rivals` (quack, FlashInfer)
are the other libraries timed; :mod:`.autograd` turns a forward into a ``fwd_bwd`` problem's ``run`` and
:mod:`.backward_only` into a backward row's (the backward call alone). This package sits below ``bench``,
``profile`` and ``train`` and reaches solkit's kernels only through :mod:`solkit.kernels`.
"""

from solkit.backends.autograd import FWD_HELPERS, vjp
from solkit.backends.registry import BACKENDS, MUTATES_INPUTS, Backend, Factory

__all__ = ["BACKENDS", "FWD_HELPERS", "MUTATES_INPUTS", "Backend", "Factory", "vjp"]
