"""Peak memory of one HF Llama training step (forward + loss + backward), simulated on the meta device at full shapes.

Meta tensors hold no data and Triton launches are made no-ops, so what runs is every line of Python that allocates:
transformers' modules, solkit.patch's forwards and ops, Liger-Kernel's functions. A dispatch mode tracks each op
output's storage until it dies (StorageWeakRef), giving the live bytes after every op, the peak, where it happens and
what is alive then. Parameters and the AdamW states (2 x parameters, bf16) are added as a constant.

Stand-ins, the same for every variant: attention keeps what cuDNN/flash SDPA keep (q, k, v, output, an fp32 log-sum-exp)
and makes dq, dk, dv in its backward; ``.item()`` on a token count returns the count. Liger's fused linear CE is run on
its sm_80+ CUDA path (dW accumulated by addmm into a bf16 buffer), as on an H200. Not modelled: cuBLAS/cuDNN
workspaces and the caching allocator's rounding (a constant, seen as ~68 MB against the H200's max_memory_allocated).

    python3 lab/benchmarks/train_peak_meta.py VARIANT [--layers 8] [--out FILE]

VARIANT: eager, patch (solkit.patch), patch-keep-product (patch with the gate and down_proj as two ops, so the GEMM
keeps act(gate) * up: solkit.patch before the gated_linear op), liger (apply_liger_kernel_to_llama). Each variant in
its own process (Liger rebinds transformers' globals). Needs transformers (and liger-kernel for ``liger``).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib
import inspect
import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # solkit picks its Triton paths; the launches below do nothing

import torch  # noqa: E402
import triton.runtime.interpreter as interpreter  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

interpreter.GridExecutor.__call__ = lambda self, *a, **k: None  # meta tensors: no data to compute on

SHAPES = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
              vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
              tie_word_embeddings=False)  # fmt: skip
BATCH, SEQ = 4, 4096


class _FlashLike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        out, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _attention(module, q, k, v, attention_mask, dropout=0.0, scaling=None, **kw):
    return _FlashLike.apply(q, k, v).transpose(1, 2), None


class Tracker(TorchDispatchMode):
    def __init__(self, keep: list[torch.Tensor]) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int, str]] = {}
        for t in keep:  # parameters and buffers: counted apart (views of them are not new memory)
            ref = StorageWeakRef(t.untyped_storage())
            self.live[ref.cdata] = (ref, 0, "param")
        self.phase, self.peak, self.where, self.snapshot = "forward", 0, "", []
        self.end_of_forward = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            return BATCH * SEQ
        if func is torch.ops.aten.equal.default:
            return True
        out = func(*args, **(kwargs or {}))
        node = torch._C._current_autograd_node()
        where = f"{self.phase}: {node.name() if node is not None else '-'}: {func.__name__}"
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                ref = StorageWeakRef(st)
                if ref.cdata not in self.live:
                    self.live[ref.cdata] = (ref, st.nbytes(), f"{where} {tuple(t.shape)} {str(t.dtype)[6:]}")
        for c in [c for c, (r, _, _) in self.live.items() if r.expired()]:
            del self.live[c]
        total = sum(n for _, n, _ in self.live.values())
        if self.phase == "forward":
            self.end_of_forward = total
        if total > self.peak:
            self.peak, self.where = total, where
            self.snapshot = [(n, tag) for _, n, tag in self.live.values() if n]
        return out


def build(layers: int):
    import transformers

    transformers.AttentionInterface.register("meta_sdpa", _attention)
    cfg = transformers.LlamaConfig(num_hidden_layers=layers, **SHAPES)
    cfg._attn_implementation = "meta_sdpa"
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.config._attn_implementation = "meta_sdpa"
    return model


def apply(variant: str, model) -> None:
    if variant.startswith("patch"):
        import solkit
        import solkit.swap.patching as patching
        from solkit.swap import forwards

        patching._probe = lambda *a, **k: 0.0  # the probe computes on data; meta tensors have none
        patching.random_like_activation = lambda shape, like, seed=0: torch.empty(shape, dtype=like.dtype,
                                                                                  device=like.device)  # fmt: skip
        report = solkit.patch(model, options={"attention": False})  # SDPA's backend order: nothing to allocate
        assert report.complete, str(report)
        if variant == "patch-keep-product":
            for layer in model.model.layers:
                plan = getattr(layer.mlp, forwards.PLAN)
                setattr(layer.mlp, forwards.PLAN, dataclasses.replace(plan, fused_down=False))
        ops = importlib.import_module("solkit.kernels.common.ops")
        ce_ops = importlib.import_module("solkit.kernels.cross_entropy.ops")
        ops.traced = ce_ops.traced = torch.compiler.is_compiling  # the tracker is a dispatch mode: stay on eager paths
    elif variant == "liger":
        import liger_kernel.ops.fused_linear_cross_entropy as flce

        src = inspect.getsource(flce.fused_linear_cross_entropy_forward)
        cuda = (
            'grad_weight.device.type == "cuda"\n'
            "                and torch.cuda.get_device_capability(grad_weight.device)[0] >= 8"
        )
        if src.count(cuda) != 2:
            raise SystemExit("liger-kernel: its fused linear CE's CUDA test is not where this script expects it")
        exec(src.replace(cuda, "True"), flce.__dict__)  # noqa: S102 - the sm_80+ CUDA branch, as on an H200
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(model=model)
    elif variant != "eager":
        raise SystemExit(f"unknown variant {variant!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--out")
    a = ap.parse_args()
    model = build(a.layers)
    apply(a.variant, model)
    x = torch.zeros(BATCH, SEQ, dtype=torch.long, device="meta")
    tracker = Tracker([*model.parameters(), *model.buffers()])
    with tracker:
        loss = model(input_ids=x, labels=x).loss
        tracker.phase = "backward"
        loss.backward()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    alive = collections.Counter()
    for n, tag in tracker.snapshot:
        alive[tag] += n
    result = {
        "variant": a.variant, "layers": a.layers, "batch": BATCH, "seq": SEQ, "shapes": SHAPES, "dtype": "bf16",
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "versions": {"torch": torch.__version__, **_versions()},
        "param_bytes": params, "step_peak_bytes": tracker.peak, "end_of_forward_bytes": tracker.end_of_forward,
        "peak_bytes_with_params_and_adamw": tracker.peak + 3 * params,
        "peak_gib_with_params_and_adamw": round((tracker.peak + 3 * params) / 2**30, 3), "peak_at": tracker.where,
        "alive_at_peak_mib": {tag: round(n / 2**20, 1) for tag, n in alive.most_common()},
    }  # fmt: skip
    text = json.dumps(result, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(f"{a.variant}: peak {result['peak_gib_with_params_and_adamw']} GiB at {tracker.where}")


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("transformers", "liger_kernel", "triton"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


if __name__ == "__main__":
    main()
