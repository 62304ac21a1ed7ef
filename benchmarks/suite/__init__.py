"""The maintained benchmark suite: declarative plans (``benchmarks/plans/*.yaml``) run by ``benchmarks/run.py``.

* :mod:`.registry`: the ops (inputs, reference, bytes and FLOPs) and their implementations;
* :mod:`.plan`: loading and validating a plan, expanding it into cases;
* :mod:`.measure`: correctness against an fp64 reference, timing with ``solkit.timing``, SOL;
* :mod:`.meta`: the run's record (device, versions, commit) and where its JSON goes.
"""
