"""Generate solkit's built-in suite (src/solkit/problems/suite/) in SOL-ExecBench's problem format.

The generated definition.json / workload.jsonl files are the source of truth and are committed;
this script documents where every shape comes from and regenerates them:

    python tools/gen_suite.py

Workloads come from real model configs (Llama-3 8B/70B, Qwen2.5-7B, Gemma-2-9B, Mistral-7B) in
three size classes, recorded in each workload's ``solkit`` extension key (SOL-ExecBench ignores it):

* ``s``: decode sizes (16 tokens, attention over 256 positions): fits a laptop CPU;
* ``m``: 2048-token prefill: fits a 24 GB GPU;
* ``l``: 8192-token training/prefill steps (16k tokens for fused linear cross-entropy): an H200.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "solkit" / "problems" / "suite"

MODELS = {
    "llama3-8b": dict(hidden=4096, inter=14336, vocab=128256, heads=32, kv=8, head_dim=128),
    "llama3-70b": dict(hidden=8192, inter=28672, vocab=128256, heads=64, kv=8, head_dim=128),
    "qwen2.5-7b": dict(hidden=3584, inter=18944, vocab=152064, heads=28, kv=4, head_dim=128),
    "gemma2-9b": dict(hidden=3584, inter=14336, vocab=256000, heads=16, kv=8, head_dim=256),
    "mistral-7b": dict(hidden=4096, inter=14336, vocab=32768, heads=32, kv=8, head_dim=128),
}
TOKENS = {"s": 16, "m": 2048, "l": 8192}
SEQ = {"s": 256, "m": 2048, "l": 8192}  # attention sequence length (batch 1)
# Which models feed which size class: two per class keeps the suite short.
SIZE_MODELS = {"s": ["llama3-8b", "qwen2.5-7b"], "m": ["llama3-8b", "mistral-7b"], "l": ["llama3-8b", "llama3-70b"]}

HEADER = "import torch\nimport torch.nn.functional as F\n\n"
RMS = """
def _rmsnorm(x, weight, eps=1e-5):
    # Llama casting: fp32 statistics, normalised value cast back before the weight multiply.
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)
"""
ROPE = """
def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rope(x, cos, sin):
    # x: [batch, seq, heads, head_dim]; cos/sin: [seq, head_dim] (half-split / NeoX layout)
    c = cos[None, :, None, :].float()
    s = sin[None, :, None, :].float()
    return (x.float() * c + _rotate_half(x.float()) * s).to(x.dtype)
"""
GRAD = """
def _vjp(fn, inputs, grads):
    # Forward then backward through autograd; torch.autograd.grad never accumulates into .grad.
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) for t in inputs]
        out = fn(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        g = torch.autograd.grad(outs, leaves, grads)
    return tuple(o.detach() for o in outs), g
"""
CUSTOM_CE = """
def make_inputs(axes, device):
    # Fresh draws from the (harness-seeded) global generator; class indices must be valid.
    T, V = axes["num_tokens"], axes["vocab_size"]
    logits = torch.randn(T, V, device=device, dtype=torch.bfloat16)
    targets = torch.randint(0, V, (T,), device=device)
    return {"logits": logits, "targets": targets}
"""
CUSTOM_FLCE = """
def make_inputs(axes, device):
    T, H, V = axes["num_tokens"], axes["hidden_size"], axes["vocab_size"]
    hidden = torch.randn(T, H, device=device, dtype=torch.bfloat16)
    weight = (torch.randn(V, H, device=device) / H**0.5).to(torch.bfloat16)
    targets = torch.randint(0, V, (T,), device=device)
    return {"hidden_states": hidden, "weight": weight, "targets": targets}
"""
CUSTOM_ROPE = """
def make_inputs(axes, device):
    # Real RoPE tables (Llama-3, theta 500000): cos/sin repeat their first half, as every model's do.
    B, S, Hq, Hk, D = (axes[n] for n in ("batch_size", "seq_len", "num_heads", "num_kv_heads", "head_dim"))
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=device, dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(S, device=device, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    out = {"q": torch.randn(B, S, Hq, D, device=device, dtype=torch.bfloat16),
           "k": torch.randn(B, S, Hk, D, device=device, dtype=torch.bfloat16),
           "cos": emb.cos().to(torch.bfloat16), "sin": emb.sin().to(torch.bfloat16)}
    return out
"""
CUSTOM_ROPE_BWD = CUSTOM_ROPE.replace(
    "    return out\n",
    "    out['grad_q'] = torch.randn_like(out['q'])\n    out['grad_k'] = torch.randn_like(out['k'])\n    return out\n",
)
CUSTOM_EMB = """
def make_inputs(axes, device):
    T, V, H = axes["num_tokens"], axes["vocab_size"], axes["hidden_size"]
    ids = torch.randint(0, V, (T,), device=device)
    weight = torch.randn(V, H, device=device, dtype=torch.bfloat16)
    return {"input_ids": ids, "weight": weight}
"""

CUSTOM_EMB_BWD = CUSTOM_EMB.replace(
    '    return {"input_ids": ids, "weight": weight}\n',
    "    dy = torch.randn(T, H, device=device, dtype=torch.bfloat16)\n"
    '    return {"input_ids": ids, "weight": weight, "grad_output": dy}\n',
)
# The backward rows time the backward call alone (solkit.backends.backward_only); their bytes are that call's.
BWD_NOTE = "The reference runs forward and backward; solkit bench times the backward alone."


def T(*axes: str, dtype: str = "bfloat16") -> dict:
    return {"shape": list(axes), "dtype": dtype}


def var(*names: str) -> dict:
    return {n: {"type": "var"} for n in names}


PROBLEMS: list[dict] = []


def problem(name, op_type, mode, description, axes, inputs, outputs, body, custom=None, flops=None, nbytes=None):
    ref = HEADER + "".join(body[:-1]) + "\n" + textwrap.dedent(body[-1]).strip() + "\n"
    d = {
        "name": name,
        "op_type": op_type,
        "description": description,
        "axes": axes,
        "inputs": inputs,
        "outputs": outputs,
        "reference": ref,
        "solkit": {"mode": mode, **({"flops": flops} if flops else {}), **({"bytes": nbytes} if nbytes else {})},
    }
    if custom:
        d["custom_inputs_entrypoint"] = "make_inputs"
    PROBLEMS.append(d)


def build() -> None:
    x = T("num_tokens", "hidden_size")
    w = T("hidden_size")
    problem("gemm_bf16", "gemm", "fwd", "y = x @ w.T (a projection), bf16 in/out, fp32 accumulate.",
            var("num_tokens", "in_features", "out_features"),
            {"x": T("num_tokens", "in_features"), "w": T("out_features", "in_features")},
            {"y": T("num_tokens", "out_features")},
            ["def run(x, w):\n    return x @ w.t()"])  # fmt: skip
    problem("o_proj_residual", "gemm", "fwd",
            "Attention o_proj with the residual add: y = x @ w.T + residual (the seed's case study).",
            var("num_tokens", "in_features", "out_features"),
            {"x": T("num_tokens", "in_features"), "w": T("out_features", "in_features"),
             "residual": T("num_tokens", "out_features")},
            {"y": T("num_tokens", "out_features")},
            ["def run(x, w, residual):\n    return x @ w.t() + residual"])  # fmt: skip
    problem("gate_up_swiglu", "gemm", "fwd",
            "Fused gate/up projection then SwiGLU: g, u = (x @ w.T).chunk(2); y = silu(g) * u.",
            {**var("num_tokens", "hidden_size", "intermediate_size"),
             "gate_up_size": {"type": "expr", "expression": "2 * intermediate_size"}},
            {"x": x, "w_gate_up": T("gate_up_size", "hidden_size")},
            {"y": T("num_tokens", "intermediate_size")},
            ["def run(x, w_gate_up):\n    g, u = (x @ w_gate_up.t()).chunk(2, dim=-1)\n"
             "    return (F.silu(g.float()) * u.float()).to(x.dtype)"])  # fmt: skip
    problem("rmsnorm", "rmsnorm", "fwd", "RMSNorm, Llama casting, eps 1e-5, fp32 statistics, bf16 I/O.",
            var("num_tokens", "hidden_size"), {"hidden_states": x, "weight": w}, {"output": x},
            [RMS, "def run(hidden_states, weight):\n    return _rmsnorm(hidden_states, weight)"])  # fmt: skip
    problem("rmsnorm_bwd", "rmsnorm", "bwd", "RMSNorm backward (dX, dW) alone, as training runs it: the timed call "
            "reads the forward's saved tensors (x, fp32 1/rms per row) and dY. " + BWD_NOTE,
            var("num_tokens", "hidden_size"), {"hidden_states": x, "weight": w, "grad_output": x},
            {"grad_hidden_states": x, "grad_weight": w},
            [RMS, GRAD, "def run(hidden_states, weight, grad_output):\n"
             "    _, (dx, dw) = _vjp(_rmsnorm, (hidden_states, weight), (grad_output,))\n"
             "    return dx, dw"],
            # read x, dY, w and 1/rms (fp32); write dX and dW
            nbytes="2 * (3 * num_tokens * hidden_size + 2 * hidden_size) + 4 * num_tokens")  # fmt: skip
    problem("add_rmsnorm", "rmsnorm", "fwd", "Fused residual add + RMSNorm: s = x + r; returns (s, rmsnorm(s)).",
            var("num_tokens", "hidden_size"), {"hidden_states": x, "residual": x, "weight": w},
            {"residual_out": x, "output": x},
            [RMS, "def run(hidden_states, residual, weight):\n    s = hidden_states + residual\n"
             "    return s, _rmsnorm(s, weight)"])  # fmt: skip
    ln = "def _layernorm(x, weight, bias):\n    return F.layer_norm(x.float(), x.shape[-1:], weight.float(), " \
         "bias.float(), 1e-5).to(x.dtype)\n"  # fmt: skip
    problem("layernorm", "layernorm", "fwd", "LayerNorm with weight and bias, eps 1e-5, fp32 math, bf16 I/O.",
            var("num_tokens", "hidden_size"), {"x": x, "weight": w, "bias": w}, {"output": x},
            [ln, "def run(x, weight, bias):\n    return _layernorm(x, weight, bias)"])  # fmt: skip
    problem("layernorm_bwd", "layernorm", "bwd", "LayerNorm backward (dX, dW, dB) alone: the timed call reads the "
            "forward's saved tensors (x, fp32 mean and 1/std per row) and dY. " + BWD_NOTE,
            var("num_tokens", "hidden_size"), {"x": x, "weight": w, "bias": w, "grad_output": x},
            {"grad_x": x, "grad_weight": w, "grad_bias": w},
            [ln, GRAD, "def run(x, weight, bias, grad_output):\n"
             "    _, (dx, dw, db) = _vjp(_layernorm, (x, weight, bias), (grad_output,))\n"
             "    return dx, dw, db"],
            # read x, dY, w and mean, 1/std (fp32); write dX, dW, dB
            nbytes="2 * (3 * num_tokens * hidden_size + 3 * hidden_size) + 8 * num_tokens")  # fmt: skip
    gu = T("num_tokens", "intermediate_size")
    sw = "def _swiglu(gate, up):\n    return (F.silu(gate.float()) * up.float()).to(gate.dtype)\n"
    ge = "def _geglu(gate, up):\n    return (F.gelu(gate.float(), approximate='tanh') * up.float()).to(gate.dtype)\n"
    problem("swiglu", "swiglu", "fwd", "SwiGLU gate: silu(gate) * up, fp32 math.",
            var("num_tokens", "intermediate_size"), {"gate": gu, "up": gu}, {"output": gu},
            [sw, "def run(gate, up):\n    return _swiglu(gate, up)"])  # fmt: skip
    problem("swiglu_bwd", "swiglu", "bwd", "SwiGLU backward (d gate, d up) alone: the timed call reads the "
            "forward's saved gate and up and dY. " + BWD_NOTE,
            var("num_tokens", "intermediate_size"), {"gate": gu, "up": gu, "grad_output": gu},
            {"grad_gate": gu, "grad_up": gu},
            [sw, GRAD, "def run(gate, up, grad_output):\n"
             "    _, (dg, du) = _vjp(_swiglu, (gate, up), (grad_output,))\n    return dg, du"],
            nbytes="2 * 5 * num_tokens * intermediate_size")  # read gate, up, dY; write d gate, d up  # fmt: skip
    problem("geglu", "geglu", "fwd", "GeGLU gate (tanh GELU): gelu_tanh(gate) * up, fp32 math.",
            var("num_tokens", "intermediate_size"), {"gate": gu, "up": gu}, {"output": gu},
            [ge, "def run(gate, up):\n    return _geglu(gate, up)"])  # fmt: skip
    sx = T("num_tokens", "vocab_size")
    sm = "def _softmax(x):\n    return torch.softmax(x.float(), dim=-1).to(x.dtype)\n"
    problem("softmax", "softmax", "fwd", "Row softmax over a vocabulary-wide row, fp32 math.",
            var("num_tokens", "vocab_size"), {"x": sx}, {"output": sx},
            [sm, "def run(x):\n    return _softmax(x)"])  # fmt: skip
    problem("softmax_bwd", "softmax", "bwd", "Row softmax backward alone: the timed call reads the forward's saved "
            "output y and dY. " + BWD_NOTE,
            var("num_tokens", "vocab_size"), {"x": sx, "grad_output": sx}, {"grad_x": sx},
            [sm, GRAD, "def run(x, grad_output):\n    _, (dx,) = _vjp(_softmax, (x,), (grad_output,))\n"
             "    return dx"],
            nbytes="2 * 3 * num_tokens * vocab_size")  # read y, dY; write dX  # fmt: skip
    q = T("batch_size", "seq_len", "num_heads", "head_dim")
    k = T("batch_size", "seq_len", "num_kv_heads", "head_dim")
    cs = T("seq_len", "head_dim")
    rope_axes = var("batch_size", "seq_len", "num_heads", "num_kv_heads", "head_dim")
    problem("rope", "rope", "fwd", "RoPE (half-split, Llama) on q and k, layout [batch, seq, heads, head_dim].",
            rope_axes, {"q": q, "k": k, "cos": cs, "sin": cs}, {"q_out": q, "k_out": k},
            [ROPE, CUSTOM_ROPE, "def run(q, k, cos, sin):\n    return _rope(q, cos, sin), _rope(k, cos, sin)"],
            custom=True)  # fmt: skip
    problem("rope_bwd", "rope", "fwd_bwd", "RoPE forward and backward on q and k.",
            rope_axes, {"q": q, "k": k, "cos": cs, "sin": cs, "grad_q": q, "grad_k": k},
            {"q_out": q, "k_out": k, "grad_q_in": q, "grad_k_in": k},
            [ROPE, GRAD, CUSTOM_ROPE_BWD, "def run(q, k, cos, sin, grad_q, grad_k):\n"
             "    f = lambda a, b: (_rope(a, cos, sin), _rope(b, cos, sin))\n"
             "    (qo, ko), (dq, dk) = _vjp(f, (q, k), (grad_q, grad_k))\n    return qo, ko, dq, dk"],
            custom=True)  # fmt: skip
    problem("cross_entropy", "cross_entropy", "fwd_bwd",
            "Cross-entropy over a 128k vocabulary, mean over tokens, forward and backward (grad of the logits).",
            var("num_tokens", "vocab_size"), {"logits": sx, "targets": T("num_tokens", dtype="int64")},
            {"loss": {"shape": [], "dtype": "float32"}, "grad_logits": sx},
            [GRAD, CUSTOM_CE, "def run(logits, targets):\n"
             "    f = lambda z: F.cross_entropy(z.float(), targets)\n"
             "    (loss,), (dz,) = _vjp(f, (logits,), (torch.ones((), device=logits.device),))\n"
             "    return loss, dz"], custom=True)  # fmt: skip
    problem("fused_linear_cross_entropy", "fused_linear_cross_entropy", "fwd_bwd",
            "LM head + cross-entropy, forward and backward: loss = CE(h @ W.T, t); returns (loss, dh, dW).",
            var("num_tokens", "hidden_size", "vocab_size"),
            {"hidden_states": x, "weight": T("vocab_size", "hidden_size"), "targets": T("num_tokens", dtype="int64")},
            {"loss": {"shape": [], "dtype": "float32"}, "grad_hidden_states": x,
             "grad_weight": T("vocab_size", "hidden_size")},
            [GRAD, CUSTOM_FLCE, "def run(hidden_states, weight, targets):\n"
             "    f = lambda h, w: F.cross_entropy((h @ w.t()).float(), targets)\n"
             "    one = torch.ones((), device=hidden_states.device)\n"
             "    (loss,), (dh, dw) = _vjp(f, (hidden_states, weight), (one,))\n    return loss, dh, dw"],
            custom=True)  # fmt: skip
    aq = T("batch_size", "num_heads", "seq_len", "head_dim")
    ak = T("batch_size", "num_kv_heads", "seq_len", "head_dim")
    attn = ("def _attn(q, k, v):\n    rep = q.shape[1] // k.shape[1]\n"
            "    k = k.repeat_interleave(rep, dim=1)\n    v = v.repeat_interleave(rep, dim=1)\n"
            "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n")  # fmt: skip
    attn_axes = var("batch_size", "num_heads", "num_kv_heads", "seq_len", "head_dim")
    causal_flops = {"bf16_tensor": "2 * batch_size * num_heads * seq_len * seq_len * head_dim"}
    problem("attention_causal", "attention", "fwd",
            "Causal GQA attention forward, layout [batch, heads, seq, head_dim]; FLOPs counted causal-halved.",
            attn_axes, {"q": aq, "k": ak, "v": ak}, {"output": aq},
            [attn, "def run(q, k, v):\n    return _attn(q, k, v)"], flops=causal_flops)  # fmt: skip
    problem("attention_causal_bwd", "attention", "fwd_bwd",
            "Causal GQA attention forward and backward; FLOPs counted causal-halved (fwd 4BHS²D/2, bwd 2.5x fwd).",
            attn_axes, {"q": aq, "k": ak, "v": ak, "grad_output": aq},
            {"output": aq, "grad_q": aq, "grad_k": ak, "grad_v": ak},
            [attn, GRAD, "def run(q, k, v, grad_output):\n"
             "    (o,), (dq, dk, dv) = _vjp(_attn, (q, k, v), (grad_output,))\n    return o, dq, dk, dv"],
            flops={"bf16_tensor": "7 * batch_size * num_heads * seq_len * seq_len * head_dim"})  # fmt: skip
    problem("embedding", "embedding", "fwd", "Token embedding lookup: weight[input_ids].",
            var("num_tokens", "vocab_size", "hidden_size"),
            {"input_ids": T("num_tokens", dtype="int64"), "weight": T("vocab_size", "hidden_size")},
            {"output": x}, [CUSTOM_EMB, "def run(input_ids, weight):\n    return F.embedding(input_ids, weight)"],
            custom=True,
            # A gather reads only the looked-up rows, not the whole table: ids + rows read + rows written.
            nbytes="8 * num_tokens + 2 * 2 * num_tokens * hidden_size")  # fmt: skip
    problem("embedding_bwd", "embedding", "fwd_bwd",
            "Token embedding lookup and its backward: the rows, then the dense weight gradient (a scatter-add of dY "
            "rows by id; ids repeat).",
            var("num_tokens", "vocab_size", "hidden_size"),
            {"input_ids": T("num_tokens", dtype="int64"), "weight": T("vocab_size", "hidden_size"),
             "grad_output": x},
            {"output": x, "grad_weight": T("vocab_size", "hidden_size")},
            [GRAD, CUSTOM_EMB_BWD, "def run(input_ids, weight, grad_output):\n"
             "    (y,), (dw,) = _vjp(lambda w: F.embedding(input_ids, w), (weight,), (grad_output,))\n"
             "    return y, dw"],
            custom=True,
            # forward: ids + rows read + rows written; backward: ids + dY read + the dense dW written once
            nbytes="8 * num_tokens + 2 * 2 * num_tokens * hidden_size"
                   " + 8 * num_tokens + 2 * num_tokens * hidden_size + 2 * vocab_size * hidden_size")  # fmt: skip


def workloads_for(p: dict) -> list[dict]:
    out = []
    for size, models in SIZE_MODELS.items():
        if size == "s" and (p["op_type"] == "fused_linear_cross_entropy" or p["name"] == "embedding_bwd"):
            models = ["mistral-7b"]  # a 32k vocabulary keeps the CPU-sized class light (a dense V x H gradient)
        for model in models:
            c = MODELS[model]
            t = TOKENS[size]
            op = p["op_type"]
            if p["name"] in ("gemm_bf16", "o_proj_residual"):
                axes = {"num_tokens": t, "in_features": c["hidden"], "out_features": c["hidden"]}
                if p["name"] == "gemm_bf16" and model != "llama3-8b":
                    axes = {"num_tokens": t, "in_features": c["inter"], "out_features": c["hidden"]}  # down_proj
            elif p["name"] == "gate_up_swiglu":
                axes = {"num_tokens": t, "hidden_size": c["hidden"], "intermediate_size": c["inter"]}
            elif op in ("rmsnorm", "layernorm"):
                axes = {"num_tokens": t, "hidden_size": c["hidden"]}
            elif op in ("swiglu", "geglu"):
                axes = {"num_tokens": t, "intermediate_size": c["inter"]}
            elif op in ("softmax", "cross_entropy"):
                axes = {"num_tokens": t if size != "l" else 4096, "vocab_size": c["vocab"]}
            elif op == "fused_linear_cross_entropy":
                tt = {"s": 16, "m": 2048, "l": 16384}[size]
                axes = {"num_tokens": tt, "hidden_size": c["hidden"], "vocab_size": c["vocab"]}
            elif op == "rope":
                axes = {"batch_size": 1, "seq_len": t, "num_heads": c["heads"], "num_kv_heads": c["kv"],
                        "head_dim": c["head_dim"]}  # fmt: skip
            elif op == "attention":
                axes = {"batch_size": 1, "num_heads": c["heads"], "num_kv_heads": c["kv"], "seq_len": SEQ[size],
                        "head_dim": c["head_dim"]}  # fmt: skip
            elif op == "embedding":
                axes = {"num_tokens": t, "vocab_size": c["vocab"], "hidden_size": c["hidden"]}
            else:
                raise ValueError(p["name"])
            kind = "custom" if p.get("custom_inputs_entrypoint") else "random"
            inputs = {name: {"type": kind} for name in p["inputs"]}
            wid = uuid.uuid5(uuid.NAMESPACE_URL, f"solkit/{p['name']}/{size}/{model}")
            out.append({"uuid": str(wid), "axes": axes, "inputs": inputs,
                        "tolerance": {"max_atol": 1e-2, "max_rtol": 1e-2, "required_matched_ratio": 1.0},
                        "solkit": {"size": size, "model": model}})  # fmt: skip
    return out


def main() -> None:
    build()
    for p in PROBLEMS:
        d = ROOT / p["name"]
        d.mkdir(parents=True, exist_ok=True)
        (d / "definition.json").write_text(json.dumps(p, indent=2) + "\n")
        (d / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in workloads_for(p)))
    print(f"wrote {len(PROBLEMS)} problems under {ROOT}")


if __name__ == "__main__":
    main()
