"""Graph breaks of solkit's decoder layer under torch.compile (Inductor), JSON to --out (docs/kernels/custom_ops.md).

Layer 0 of solkit's Llama model (``--config``, one layer, bf16) with every solkit swap applied: Dynamo's explain
(graphs, graph breaks and their reasons, the ``solkit::`` ops in the graph), then ``torch.compile(fullgraph=True)``
with Inductor, forward + backward against eager (max abs difference of the output and the input gradient) and
the median time of each (CUDA events over ``--iters`` steps after warm-up).

    python benchmarks/gpu_jobs/custom_ops_compile.py --out compile.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from solkit.train import variants as V
    from solkit.train.config import get_config
    from solkit.train.model import build_model

    cfg = get_config(args.config, seq=args.seq, batch=args.batch, layers=1)
    model = build_model(cfg, "cuda", torch.bfloat16, seed=0)
    prepared = V.apply_variant(model, "solkit")
    model.reset_rope(args.seq)
    layer, cos, sin = model.layers[0], model.rope_cos[: args.seq], model.rope_sin[: args.seq]
    h = torch.randn(args.batch, args.seq, cfg.hidden, device="cuda", dtype=torch.bfloat16)
    result: dict = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__},
        "command": " ".join(sys.argv),
        "config": cfg.model_dump(),
        "swaps": [s.to_dict() for s in prepared.swaps],
    }
    explained = torch._dynamo.explain(layer)(h, cos, sin)
    ops = sorted({str(n.target) for g in explained.graphs for n in g.graph.nodes if "solkit" in str(n.target)})
    result["explain"] = {
        "graph_count": explained.graph_count,
        "graph_break_count": explained.graph_break_count,
        "break_reasons": [str(r.reason) for r in explained.break_reasons],
        "solkit_ops_in_graph": ops,
    }
    print("explain", result["explain"], flush=True)

    def step(fn):
        x = h.detach().requires_grad_(True)
        out = fn(x, cos, sin)
        out.float().square().mean().backward()
        return out.detach().float(), x.grad.float()

    def median_ms(fn):
        for _ in range(3):
            step(fn)
        times = []
        for _ in range(args.iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step(fn)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return sorted(times)[len(times) // 2]

    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True)
    try:
        want, got = step(layer), step(compiled)
        result["fwd_bwd"] = {
            "max_abs_diff_out": float((want[0] - got[0]).abs().max()),
            "max_abs_diff_grad_x": float((want[1] - got[1]).abs().max()),
            "eager_ms": median_ms(layer),
            "compiled_ms": median_ms(compiled),
        }
    except Exception as exc:  # noqa: BLE001 - the explain result above is still written
        result["fwd_bwd"] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    print("fwd_bwd", result["fwd_bwd"], flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0 if result["explain"]["graph_break_count"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
