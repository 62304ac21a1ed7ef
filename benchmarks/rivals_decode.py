"""Decode attention and embedding against their rivals on one GPU, with correctness, into one JSON.

    python3 benchmarks/rivals_decode.py --out DIR [--parts decode,embedding] [--quick]

* ``decode``: Llama-3-8B heads (32 q / 8 kv, d 128), bf16, one new token, batch 1/8/64 x KV 8k/32k/128k:
  ``solkit.kernels.attention.decode_attention`` on a paged cache (16-token blocks, scattered) and on a contiguous
  one; SDPA decode on the contiguous cache (``enable_gqa=True``; default dispatch and each backend forced, a
  refusal recorded with its reason); FlashInfer's paged decode where it imports. Each is checked against fp32
  SDPA on the first two sequences and timed by ``solkit.timing.benchmark``; SOL = the bytes of K/V read + q +
  out (``decode.sol_bytes``) over the copy bandwidth measured here (a 2 GiB device copy) and over the datasheet's.
* ``decode_sweep``: the paged decode over launch settings (``block_n`` 32/64/128, warps 4/8, stages 2-3) at
  batch 1/8/64 x 32k keys.
* ``embedding``: Llama-3 8B/70B tables (128256 x 4096 / 8192, 8192 tokens), forward and forward+backward:
  solkit (sorted, dense and atomic backward), eager, torch.compile.

Every part runs on its own: an exception becomes that part's ``error`` and the others go on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import platform
import subprocess
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F


def _env(argv: list[str]) -> dict:
    import triton

    from solkit.backends.cudnn_attention import probe as cudnn_probe
    from solkit.backends.rivals import probe

    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()  # fmt: skip
    except Exception:  # noqa: BLE001 - the driver version is a nicety
        driver = None
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or None
    return {
        "device": props.name, "sm_count": props.multi_processor_count, "driver": driver,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "command": " ".join([sys.executable, *argv]), "commit": commit,
        "rivals": {"cudnn": cudnn_probe() or "available", "flashinfer": probe("flashinfer") or "available",
                   "quack": probe("quack") or "available"},
    }  # fmt: skip


def _time(fn, args, reps):
    from solkit.timing import benchmark

    r = benchmark(fn, args, reps=reps, trials=3, device="cuda")
    return {"ms": r.median_ms, "method": r.method}


def copy_bandwidth() -> float:
    """Bytes/s of a 2 GiB device-to-device copy (read + write counted), the floor every row is scored on."""
    src = torch.empty(2**30, dtype=torch.uint16, device="cuda")
    dst = torch.empty_like(src)
    t = _time(lambda: dst.copy_(src), None, 20)["ms"]
    return 2 * src.nbytes / (t * 1e-3)


def read_bandwidth() -> float:
    """Bytes/s of reading 2 GiB once (``torch.sum`` into one value): the floor of a read-only stream like decode,
    which a copy (read + write) underestimates."""
    src = torch.ones(2**30, dtype=torch.bfloat16, device="cuda")
    t = _time(lambda: src.sum(dtype=torch.float32), None, 20)["ms"]
    return src.nbytes / (t * 1e-3)


def _paged(k, v, block):
    """A scattered paged copy of the contiguous cache ``[b, n, h, d]`` (n a multiple of block) and its table."""
    b, n, h, d = k.shape
    per = n // block
    perm = torch.randperm(b * per, device=k.device)
    kc, vc = torch.empty_like(k).view(b * per, block, h, d), torch.empty_like(v).view(b * per, block, h, d)
    kc[perm] = k.reshape(b * per, block, h, d)
    vc[perm] = v.reshape(b * per, block, h, d)
    return kc, vc, perm.view(b, per).to(torch.int32)


def _sdpa_decode(backend=None):
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v):  # q [b, 1, hq, d], caches [b, n, hkv, d]: SDPA's [b, h, s, d] views, no copy
        call = lambda: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),  # noqa: E731
                                                      enable_gqa=True).transpose(1, 2)  # fmt: skip
        if backend is None:
            return call()
        with sdpa_kernel(backend):
            return call()

    return run


def _flashinfer_decode(kc, vc, table, lens, hq, hkv, d, block):
    import flashinfer

    b, per = table.shape
    ws = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
    indptr = torch.arange(0, (b + 1) * per, per, dtype=torch.int32, device="cuda")
    last = (lens - (per - 1) * block).to(torch.int32)
    wrapper.plan(indptr, table.reshape(-1), last, hq, hkv, d, block, data_type=kc.dtype, q_data_type=kc.dtype)
    return lambda q: wrapper.run(q[:, 0], (kc, vc)).unsqueeze(1)


def _decode_impls(q, k, v, lens, kc, vc, table, n, dims):
    """name -> ``fn(q)`` for one decode shape (FlashInfer only where it imports and plans)."""
    from torch.nn.attention import SDPBackend

    from solkit.kernels.attention import decode_attention

    impls = {
        "solkit_paged": lambda q: decode_attention(q, kc, vc, lens, table, max_seq_len=n),
        "solkit_contiguous": lambda q: decode_attention(q, k, v, lens),
        "solkit_paged_combine_kernel": lambda q: decode_attention(
            q, kc, vc, lens, table, max_seq_len=n, options={"combine": "kernel"}
        ),
        "sdpa": lambda q: _sdpa_decode()(q, k, v),
    }
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):  # fmt: skip
        impls[f"sdpa_{name}"] = lambda q, be=be: _sdpa_decode(be)(q, k, v)
    try:
        impls["flashinfer_paged"] = _flashinfer_decode(kc, vc, table, lens, *dims)
    except Exception as exc:  # noqa: BLE001 - not installed, or refused: the reason is the row
        impls["flashinfer_paged"] = f"{type(exc).__name__}: {exc}"[:300]
    return impls


def _scored(row: dict, fn, args, check, bw_copy: float, spec_bw: float | None) -> dict:
    """Check (``check(out) -> max error``), time and score one implementation into ``row``."""
    try:
        err = check(fn(*args))
        row.update(max_abs_error=err, status="ok" if err < row.pop("tol") else "incorrect")
        row.update(_time(fn, [args], 20))
        t = row["ms"] * 1e-3
        row["tbs"] = row["bytes"] / t / 1e12
        # Above 1 the ceiling is too low for this traffic (a read-only stream can beat the copy ceiling): capped at
        # 1 and flagged, never scored above it.
        for key, bw in (("sol_copy", bw_copy), ("sol_spec", spec_bw)):
            if bw:
                raw = row["bytes"] / bw / t
                row[key] = min(1.0, raw)
                if raw > 1.0:
                    row.setdefault("violations", []).append(f"{key} {raw:.3f}")
    except Exception as exc:  # noqa: BLE001 - a backend that refuses or crashes is a row
        row.pop("tol", None)
        row.update(status="error", reason=f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:250]}")
    print(json.dumps({k: (round(x, 4) if isinstance(x, float) else x) for k, x in row.items()}), flush=True)
    return row


def _rel(out: torch.Tensor, want: torch.Tensor) -> float:
    """Max error relative to the largest reference value (an average over 8k-128k random values is small)."""
    return ((out.float() - want).abs().max() / want.abs().max()).item()


def _decode_shape(b: int, n: int, bw_copy: float, spec_bw: float | None) -> list[dict]:
    from solkit.kernels.attention.decode import sol_bytes

    hq, hkv, d, block = 32, 8, 128, 16
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    kc, vc, table = _paged(k, v, block)
    nbytes = sol_bytes(q, lens, hkv)
    want = _sdpa_decode()(q[:2].float(), k[:2].float(), v[:2].float())
    rows = []
    for name, fn in _decode_impls(q, k, v, lens, kc, vc, table, n, (hq, hkv, d, block)).items():
        row = {"batch": b, "kv_len": n, "impl": name, "bytes": nbytes, "tol": 2e-2}
        if isinstance(fn, str):
            rows.append({**row, "status": "unavailable", "reason": fn})
            continue
        rows.append(_scored(row, fn, (q,), lambda out: _rel(out[:2], want), bw_copy,
                            spec_bw))  # fmt: skip
    return rows


def decode_part(bw_copy: float, spec_bw: float | None, quick: bool) -> list[dict]:
    batches, lengths = ((1, 8), (8192, 32768)) if quick else ((1, 8, 64), (8192, 32768, 131072))
    rows = []
    for n in lengths:
        for b in batches:
            torch.cuda.empty_cache()
            rows += _decode_shape(b, n, bw_copy, spec_bw)
    return rows


def _sweep_batch(b: int, bw_copy: float, spec_bw: float | None) -> list[dict]:
    from solkit.kernels.attention import decode_attention
    from solkit.kernels.attention.decode import sol_bytes

    n, hq, hkv, d = 32768, 32, 8, 128
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    kc, vc, table = _paged(k, v, 16)
    want = _sdpa_decode()(q[:2].float(), k[:2].float(), v[:2].float())
    rows = []
    for block_n, warps, stages in itertools.product((32, 64, 128), (4, 8), (2, 3)):
        opts = {"block_n": block_n, "num_warps": warps, "num_stages": stages}
        row = {"batch": b, "kv_len": n, "impl": "solkit_paged", "options": opts, "bytes": sol_bytes(q, lens, hkv),
               "tol": 2e-2}  # fmt: skip
        fn = lambda q, o=opts: decode_attention(q, kc, vc, lens, table, max_seq_len=n, options=o)  # noqa: E731
        rows.append(_scored(row, fn, (q,), lambda out: _rel(out[:2], want), bw_copy, spec_bw))
    return rows


def decode_sweep(bw_copy: float, spec_bw: float | None, quick: bool) -> list[dict]:
    """solkit's paged decode over launch settings (keys per tile, warps, stages) at batch 1/8/64 x 32k keys."""
    rows = []
    for b in (1, 8) if quick else (1, 8, 64):
        torch.cuda.empty_cache()
        rows += _sweep_batch(b, bw_copy, spec_bw)
    return rows


def _fwd_bwd(fn, ids, w, dy):
    def call():
        leaf = w.detach().requires_grad_()
        y = fn(ids, leaf)
        return y, torch.autograd.grad(y, leaf, dy)[0]

    return call


def _embedding_shape(t: int, vocab: int, h: int, compiled, bw_copy: float, spec_bw: float | None) -> list[dict]:
    from solkit.kernels import embedding

    ids = torch.randint(0, vocab, (t,), device="cuda")
    w = torch.randn(vocab, h, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
    ref_w = w.float().requires_grad_()
    ref_y = F.embedding(ids, ref_w)
    ref_y.backward(dy.float())
    ref_dw = ref_w.grad
    fwd_bytes, bwd_bytes = 8 * t + 4 * t * h, 8 * t + 2 * t * h + 2 * vocab * h
    impls = {
        "solkit": lambda i, w_: embedding(i, w_),
        "solkit_atomic": lambda i, w_: embedding(i, w_, path="atomic"),
        "solkit_dense": lambda i, w_: embedding(i, w_, path="dense"),
        "eager": F.embedding,
        "compile": compiled,
    }
    rows = []
    for name, fn in impls.items():
        base = {"shape": [t, vocab, h], "impl": name, "tol": 0.1}
        if name not in ("solkit_atomic", "solkit_dense"):
            rows.append(_scored({**base, "mode": "fwd", "bytes": fwd_bytes}, lambda fn=fn: fn(ids, w), (),
                                lambda out: (out.float() - ref_y).abs().max().item(), bw_copy, spec_bw))  # fmt: skip
        rows.append(_scored({**base, "mode": "fwd_bwd", "bytes": fwd_bytes + bwd_bytes}, _fwd_bwd(fn, ids, w, dy), (),
                            lambda out: (out[1].float() - ref_dw).abs().max().item(), bw_copy, spec_bw))  # fmt: skip
    return rows


def embedding_part(bw_copy: float, spec_bw: float | None, quick: bool) -> list[dict]:
    compiled = torch.compile(F.embedding, dynamic=False)
    rows = []
    for t, vocab, h in [(8192, 128256, 4096)] + ([] if quick else [(8192, 128256, 8192)]):
        torch.cuda.empty_cache()
        rows += _embedding_shape(t, vocab, h, compiled, bw_copy, spec_bw)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="decode,embedding")
    ap.add_argument("--quick", action="store_true", help="fewer shapes (a smoke run)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"env": _env([__file__, *argv])}
    print(json.dumps(result["env"]), flush=True)
    try:
        from solkit.hardware.detect import detect_device, spec_for

        spec_bw = spec_for(detect_device("cuda")).bandwidth
    except Exception:  # noqa: BLE001 - no datasheet match: the copy basis alone
        spec_bw = None
    bw = copy_bandwidth()
    result["copy_bandwidth_tbs"], result["spec_bandwidth_tbs"] = bw / 1e12, spec_bw and spec_bw / 1e12
    result["read_bandwidth_tbs"] = read_bandwidth() / 1e12  # decode rows: compare their tbs with it
    parts = {"decode": lambda: decode_part(bw, spec_bw, args.quick),
             "decode_sweep": lambda: decode_sweep(bw, spec_bw, args.quick),
             "embedding": lambda: embedding_part(bw, spec_bw, args.quick)}  # fmt: skip
    for name in args.parts.split(","):
        try:
            result[name] = parts[name]()
        except Exception:  # noqa: BLE001 - one part failing must not stop the others
            result[name] = {"error": traceback.format_exc(limit=4)[-1500:]}
            print(f"{name}: failed\n{result[name]['error']}", flush=True)
        (out / "rivals_decode.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
