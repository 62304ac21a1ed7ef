"""Cross-entropy probes: the memory floor of the split kernels' structure, and their SASS.

Is the split reread kernel bound by memory or by its instructions? These probe kernels have its grid and
block structure (``G`` groups of ``SPLIT`` programs, persistent, each program owns a ``BLOCK``-column chunk
of every row, read as int32 pairs, rows ``r + 2G`` and ``r + 3G`` prefetched in registers) and no math:

* ``read``: pass 1's DRAM read only (each thread xors its words into a register, stored once at the end);
* ``read_reread_write``: the reread kernel's traffic: the DRAM read, row ``r`` read again (from L2) and
  written as its gradient, in place;
* ``read_write``: the packed kernel's traffic: the DRAM read, and the same words written back as the
  row's gradient, in place (no re-read).

Timed with the harness protocol (``timing.benchmark`` method auto, read L2 flush, two rotating inputs) at
the benchmark's shape next to a 2 GiB ``copy_`` (the calibrated ceiling). If the probe runs near the copy
and the real kernel does not, the math (instructions) is the limit, not the memory structure.

It also compiles the split kernels (module defaults and the ``--configs`` given) on a small input and writes
each compiled kernel's SASS and an opcode histogram (whole kernel) under ``--sass-dir``.

    python3 lab/benchmarks/ce_probe.py --out probe.json [--sass-dir DIR] [--configs "split_skew=4/split_unroll=2,..."]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import sys

import torch
import triton
import triton.language as tl

from solkit.kernels.cross_entropy import cross_entropy
from solkit.kernels.cross_entropy.dispatch import CE_CONFIG, LAST_LAUNCH
from solkit.kernels.cross_entropy.split import chunk_layout
from solkit.timing import benchmark

MODES = {"read": 0, "read_reread_write": 1, "read_write": 2}


@triton.jit
def _probe_kernel(w_ptr, out_ptr, n_rows, chunk_w, row_w, stride_w, SPLIT: tl.constexpr, WBLOCK: tl.constexpr,
                  MODE: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    n_groups = tl.num_programs(0) // SPLIT
    group = pid // SPLIT
    chunk = pid % SPLIT
    woffs = tl.arange(0, WBLOCK)
    wcols = chunk * chunk_w + woffs
    lim = tl.minimum(chunk_w, row_w - chunk * chunk_w)
    acc = tl.zeros([WBLOCK], dtype=tl.int32)
    r = group + n_groups
    x1 = tl.load(w_ptr + r.to(tl.int64) * stride_w + wcols, mask=woffs < tl.where(r < n_rows, lim, 0), other=0)
    r = group + 2 * n_groups
    x2 = tl.load(w_ptr + r.to(tl.int64) * stride_w + wcols, mask=woffs < tl.where(r < n_rows, lim, 0), other=0)
    for row in range(group, n_rows, n_groups):
        r1 = row + n_groups
        r3 = r1 + 2 * n_groups
        x3 = tl.load(w_ptr + r3.to(tl.int64) * stride_w + wcols, mask=woffs < tl.where(r3 < n_rows, lim, 0), other=0)
        if MODE == 1:
            p = w_ptr + tl.cast(row, tl.int64) * stride_w + wcols
            tl.store(p, tl.load(p, mask=woffs < lim), mask=woffs < lim)
        acc ^= x1
        if MODE == 2:
            tl.store(w_ptr + r1.to(tl.int64) * stride_w + wcols, x1, mask=woffs < tl.where(r1 < n_rows, lim, 0))
        x1 = x2
        x2 = x3
    tl.store(out_ptr + pid * WBLOCK + woffs, acc)


def run_probe(x: torch.Tensor, mode: str, block: int, warps: int, programs_per_sm: int, out: torch.Tensor):
    n_rows, n_cols = x.shape
    split, chunk_cols, blk = chunk_layout(n_cols, block)
    n_sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    groups = max(1, min(n_rows, programs_per_sm * n_sms // split))
    w = x.view(torch.int32)
    _probe_kernel[(groups * split,)](w, out, n_rows, chunk_cols // 2, n_cols // 2, x.stride(0) // 2, SPLIT=split,
                                     WBLOCK=blk // 2, MODE=MODES[mode], num_warps=warps)  # fmt: skip
    return groups * split


OPCODE = re.compile(r"\s*(?:/\*[0-9a-f]+\*/|[0-9a-fY:\-]+\t)\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def opcode_histogram(sass: str) -> dict[str, int]:
    """Opcode counts of a SASS listing (cuobjdump ``/*addr*/ OP ...;`` or nvdisasm-style lines)."""
    counts: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        m = re.match(
            r"\s*(?:/\*[0-9a-f]+\*/|[0-9a-fY:\-]+\t)\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", line
        )
        if m:
            counts[m.group(1)] += 1
    return dict(counts.most_common())


def _sass_of(compiled) -> str:
    """SASS of a compiled Triton kernel: its ``asm["sass"]``, else cuobjdump (bundled with Triton) on the cubin."""
    try:
        return compiled.asm["sass"]
    except Exception:  # noqa: BLE001
        import subprocess
        import tempfile

        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(compiled.asm["cubin"])
            f.flush()
            return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout


def dump_sass(configs: list[str], sass_dir: str, doc: dict) -> None:
    """Compile the split kernels under each config (a small input: the same specialisation as the full
    shape but the row count) and write their SASS + histograms."""
    from solkit.kernels.cross_entropy import packed as _ce_packed
    from solkit.kernels.cross_entropy import split as cross_entropy_split

    os.makedirs(sass_dir, exist_ok=True)
    x0 = (torch.randn(64, 128256, device="cuda") * 2).to(torch.bfloat16)
    y = torch.randint(0, 128256, (64,), device="cuda")
    for spec in configs:
        cfg = {**CE_CONFIG, **({k: int(v) for k, v in (kv.split("=") for kv in spec.split("/"))} if spec else {})}
        x = x0.clone().requires_grad_()
        cross_entropy(x, y, config=cfg).backward()
        doc.setdefault("sass_launches", {})[spec or "defaults"] = dict(LAST_LAUNCH)
    torch.cuda.synchronize()
    kernels = [cross_entropy_split._ce_split_reread_kernel, cross_entropy_split._ce_split_kernel,
               _ce_packed._ce_split_packed_kernel, _ce_packed._ce_split_lean_kernel]  # fmt: skip
    for fn in kernels:
        for dev_cache in getattr(fn, "device_caches", {}).values():
            for i, compiled in enumerate(dev_cache[0].values()):
                name = f"{fn.__name__}_{i}"
                try:
                    sass = _sass_of(compiled)
                except Exception as exc:  # noqa: BLE001
                    doc.setdefault("sass_errors", {})[name] = repr(exc)[:300]
                    continue
                with open(os.path.join(sass_dir, name + ".sass"), "w") as f:
                    f.write(sass)
                const = (
                    {str(k): v for k, v in getattr(compiled.src, "constants", {}).items()}
                    if hasattr(compiled, "src")
                    else {}
                )
                doc.setdefault("sass", {})[name] = {
                    "n_regs": getattr(compiled, "n_regs", None), "n_spills": getattr(compiled, "n_spills", None),
                    "constants": {k: v for k, v in const.items() if isinstance(v, (int, float, bool))},
                    "opcodes": opcode_histogram(sass), "lines": len(sass.splitlines()),
                }  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="ce_probe.json")
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--shapes", default="4096:4:4", help="probe structures block:warps:programs_per_sm,...")
    ap.add_argument("--sass-dir", default="")
    ap.add_argument("--configs", default="", help="split configs to compile for SASS: key=value/key=value,...")
    args = ap.parse_args(argv)
    dev = "cuda"
    doc = {
        "benchmark": "ce_probe", "device": torch.cuda.get_device_name(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "triton": triton.__version__, "command": " ".join(sys.argv),
        "shape": [args.rows, args.vocab], "dtype": "bfloat16",
        "timing": "solkit.harness.timing.benchmark(method='auto', l2_flush_mode='read'), 2 rotating inputs",
        "rows": [],
    }  # fmt: skip

    def save():
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1, default=str)

    src = torch.randn(2**30, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = benchmark(dst.copy_, [(src,)], method="events", reps=20, trials=2)
    bw = 2 * src.numel() * 2 / (t.median_ms * 1e-3)
    doc["copy_bandwidth_Bps"] = bw
    del src, dst
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    pool = [((torch.randn(args.rows, args.vocab, device=dev) * 2).to(torch.bfloat16),) for _ in range(2)]
    out = torch.empty(1 << 22, dtype=torch.int32, device=dev)
    nbytes_elem = args.rows * args.vocab * 2
    for shape in (sh for sh in args.shapes.split(",") if sh):
        block, warps, pps = (int(v) for v in shape.split(":"))
        for mode in MODES:
            row = {"probe": mode, "block": block, "warps": warps, "programs_per_sm": pps}
            try:
                row["programs"] = run_probe(pool[0][0], mode, block, warps, pps, out)
                call = lambda x, m=mode, b=block, w=warps, p=pps: run_probe(x, m, b, w, p, out)  # noqa: E731
                res = benchmark(call, pool, method="auto", reps=20, trials=2, l2_flush_mode="read")
                dram = nbytes_elem * (1 if mode == "read" else 2)
                row.update(median_ms=res.median_ms, cv=res.cv, method=res.method, dram_bytes=dram,
                           achieved_Bps=dram / (res.median_ms * 1e-3),
                           fraction_of_copy=dram / (res.median_ms * 1e-3) / bw)  # fmt: skip
                print(f"{shape} {mode:<18} {res.median_ms:.4f} ms  {row['achieved_Bps'] / 1e12:.3f} TB/s", flush=True)
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {exc}"[:400]
                print(row, flush=True)
            doc["rows"].append(row)
            save()
    del pool
    if args.sass_dir:
        try:
            dump_sass([""] + [c for c in args.configs.split(",") if c], args.sass_dir, doc)
        except Exception as exc:  # noqa: BLE001
            doc["sass_error"] = f"{type(exc).__name__}: {exc}"[:400]
        save()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
