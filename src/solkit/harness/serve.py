"""The candidate process: untrusted code runs here and nowhere else.

``python -m solkit.harness.serve JOB.json REPLY_FD`` — started by :mod:`solkit.harness.judge` (inside
``unshare`` namespaces when available). It confines itself (:func:`solkit.harness.sandbox.confine`)
before the solution is imported, then answers one JSON command per stdin line with one JSON line on
``REPLY_FD``. It never sees a reference output or the seed: it reads inputs from, and writes outputs
to, the buffers the judge allocated (:mod:`.buffers`), and the judge compares them itself. So nothing
this process writes can make a workload pass; a reply can only report a failure, a timing, or an
anti-cheat flag (which only hurts the candidate).

Commands: ``load``; ``call`` (one correctness call); ``time`` (the timing protocol over a pool);
``batch`` (each set of a pool called once, or ``repeat`` times, timed by the judge's clock; with ``reuse``, on the
device copies the previous batch of the same pool staged); ``ping``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from solkit import timing
from solkit.harness import anticheat as ac
from solkit.harness import buffers, sandbox, timed
from solkit.harness import correctness as cc
from solkit.harness.candidate import Failure, load_candidate
from solkit.harness.inputs import poison_
from solkit.output import jsonable
from solkit.problems.schema import Solution


class Server:
    def __init__(self, job: dict, reply) -> None:
        self.job, self.reply = job, reply
        self.device = torch.device(job["device"])
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.scratch = Path(job["scratch"])
        self.solution = Solution.model_validate(job["solution"])
        self.fn = None
        self.guard = None
        self._maps: dict[str, torch.Tensor] = {}
        self._staged: tuple[str, list[tuple], list] | None = None  # the last batch's staged pool, for "reuse"
        if self.device.type == "cuda" and self.job.get("method") in ("auto", "kernel"):
            # torch.profiler imports torch._dynamo, which wraps torch.manual_seed on import: do it before the
            # identity snapshot, so the harness's own timer is not reported as the candidate's monkey-patch; at
            # start-up, so its seconds pass while the reference runs.
            import importlib

            importlib.import_module("torch._dynamo")
            importlib.import_module("torch.profiler")

    def send(self, cid: int, **data: Any) -> None:
        self.reply.write(json.dumps(jsonable({"id": cid, **data}), default=str, allow_nan=False) + "\n")
        self.reply.flush()

    # ------------------------------------------------------------------ buffers
    def _mapped(self, spec: dict) -> torch.Tensor:
        key = spec["buf"]
        if key not in self._maps:
            self._maps[key] = buffers.open_spec(spec)
        return self._maps[key]

    def _arg(self, spec: dict) -> Any:
        if "value" in spec:
            return spec["value"]
        t = self._mapped(spec)
        return t if self.device.type == "cpu" else t.to(self.device, copy=True)

    def _outs(self, specs: list[dict]) -> list[torch.Tensor]:
        if self.device.type == "cpu":
            return [self._mapped(s) for s in specs]
        return [poison_(torch.empty(tuple(s["shape"]), dtype=buffers.dtype_of(s["dtype"]), device=self.device))
                for s in specs]  # fmt: skip

    def _deliver(self, outputs: dict[str, Any], specs: list[dict], names: list[str]) -> None:
        """Copy the candidate's outputs into the judge's buffers (checking shape and dtype first)."""
        for n, spec in zip(names, specs):
            o, buf = outputs[n], self._mapped(spec)
            if not isinstance(o, torch.Tensor):
                o = torch.tensor(o, dtype=buf.dtype)
            if tuple(o.shape) != tuple(buf.shape):
                why = f"output {n!r} has shape {tuple(o.shape)}, expected {tuple(buf.shape)}"
                raise Failure("INCORRECT_SHAPE", why)
            if o.dtype != buf.dtype:
                raise Failure("INCORRECT_DTYPE", f"output {n!r} is {o.dtype}, expected {buf.dtype}")
            if o.data_ptr() != buf.data_ptr():
                buf.copy_(o.detach())

    # ------------------------------------------------------------------ commands
    def load(self, cmd: dict) -> dict:
        self.guard = ac.IdentityGuard(extra_modules=(timing, cc, ac, timed, buffers, sys.modules[__name__]))
        self.fn = load_candidate(self.solution, self.scratch, self.device, self.job.get("include_dirs") or [])
        if why := ac.monkey_patch_reason(self.guard, "when the solution was imported"):
            raise Failure("REWARD_HACK", why)
        return {"ok": True}

    def call(self, cmd: dict) -> dict:
        dps, names = bool(cmd["dps"]), list(cmd["names"])
        inputs = {n: self._arg(s) for n, s in zip(cmd["input_names"], cmd["args"])}
        outs = self._outs(cmd["outs"]) if dps else []
        mutable = set(cmd.get("mutable", []))
        kept = self._device_copies(inputs, mutable)
        watch = ac.ThreadWatch(self.scratch / "candidate")
        before = sandbox.own_descendants()
        timed.sync(self.device)
        t0 = time.perf_counter()
        try:
            result = self.fn(*inputs.values(), *outs)
            timed.sync(self.device)
        except Exception as exc:  # noqa: BLE001
            raise Failure("RUNTIME_ERROR", f"candidate raised: {exc!r}\n{traceback.format_exc()}") from None
        ms = (time.perf_counter() - t0) * 1e3
        self._no_new_processes(before, "a correctness call")
        if why := ac.monkey_patch_reason(self.guard, "during a correctness call"):
            raise Failure("REWARD_HACK", why)
        try:
            outputs = dict(zip(names, outs)) if dps else cc.normalize_outputs(result, names)
        except cc.OutputFormatError as exc:
            raise Failure("INCORRECT_SHAPE", str(exc)) from None
        for check in (
            lambda: ac.output_objects(outputs, inputs, bool(cmd.get("aliases"))),
            # on the CPU the judge re-reads the shared outputs itself; a settle here would only give late writers time
            lambda: ac.readiness(outputs, self.device) if self.device.type == "cuda" else None,
            watch.reason,
        ):
            if why := check():
                raise Failure("REWARD_HACK", why)
        self._deliver(outputs, cmd["outs"], names)
        flags = []
        if self.device.type == "cuda":
            for (n, v), spec in zip(inputs.items(), cmd["args"]):
                if n in mutable or not isinstance(v, torch.Tensor):
                    continue
                before = kept.get(n)
                if not cc.bitwise_equal(v, before if before is not None else self._mapped(spec)):
                    flags.append(f"input {n!r} was modified by the candidate")
        return {"ok": True, "ms": ms, "modified": flags}

    def _device_copies(self, inputs: dict[str, Any], mutable: set[str]) -> dict[str, torch.Tensor]:
        """A device copy of each read-only input tensor staged for a correctness call, to find one the call wrote
        on the device (a copy there costs far less than reading GBs back to the host). Where the copies would take
        more than a quarter of the free memory, or it runs out, inputs are compared with their host buffers."""
        kept: dict[str, torch.Tensor] = {}
        if self.device.type != "cuda":
            return kept
        tensors = {n: v for n, v in inputs.items() if n not in mutable and isinstance(v, torch.Tensor)}
        free, _ = torch.cuda.mem_get_info(self.device)
        if sum(v.numel() * v.element_size() for v in tensors.values()) > free // 4:  # the call's own room first
            return kept
        for n, v in tensors.items():
            try:
                kept[n] = v.clone()
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
        return kept

    @staticmethod
    def _no_new_processes(before: set[int], when: str) -> None:
        """Processes the solution started and left running can finish its work after the call returned."""
        if new := sandbox.own_descendants() - before:
            raise Failure("REWARD_HACK", f"{len(new)} process(es) started during {when} still running after it ended")

    def _stage(self, cmd: dict) -> tuple[list[tuple], list[list[torch.Tensor]]]:
        dps = bool(cmd["dps"])
        pool, outs = [], []
        for s in cmd["pool"]:
            o = self._outs(s["outs"]) if dps else []
            outs.append(o)
            pool.append((*[self._arg(a) for a in s["args"]], *o))
        return pool, outs

    def _collect(self, cmd: dict, outs, record) -> None:
        names = list(cmd["names"])
        for i, s in enumerate(cmd["pool"]):
            if cmd["dps"]:
                self._deliver(dict(zip(names, outs[i])), s["outs"], names)
            elif i in record:
                try:
                    self._deliver(cc.normalize_outputs(record[i], names), s["outs"], names)
                except cc.OutputFormatError as exc:
                    raise Failure("REWARD_HACK", f"a timed call returned a different structure: {exc}") from None

    def _recording(self, pool, record):
        keys = {tuple(id(a) for a in args if isinstance(a, torch.Tensor)): i for i, args in enumerate(pool)}
        fn = self.fn

        def call(*args):  # keeps the latest output per pool slot for the judge's check
            result = fn(*args)
            record[keys.get(tuple(id(a) for a in args if isinstance(a, torch.Tensor)), -1)] = result
            return result

        return call

    def time(self, cmd: dict) -> dict:
        pool, outs = self._stage(cmd)
        record: dict[int, Any] = {}
        call = self.fn if cmd["dps"] else self._recording(pool, record)
        watch = ac.ThreadWatch(self.scratch / "candidate")
        before = sandbox.own_descendants()
        try:
            res, note, between = timed.time_pool(call, pool, cmd["params"], self.device, float(cmd["est_ms"]))
            timed.sync(self.device)
        except Exception as exc:  # noqa: BLE001
            raise Failure("RUNTIME_ERROR", f"timing failed: {exc!r}\n{traceback.format_exc()}") from None
        if why := ac.monkey_patch_reason(self.guard, "during timing"):
            raise Failure("REWARD_HACK", why)
        if why := watch.reason():
            raise Failure("REWARD_HACK", f"timing: {why}")
        self._no_new_processes(before, "timing")
        self._collect(cmd, outs, record)
        hidden = {}
        if self.device.type == "cuda":
            args = pool[0]
            hidden = ac.hidden_work(lambda: self.fn(*args), self.device)
            if why := ac.hidden_work_reason(hidden):
                raise Failure("REWARD_HACK", why)
        timing_dict = res.to_dict()
        if between:
            timing_dict["between_calls"] = between
        return {"ok": True, "timing": timing_dict, "note": note, "hidden_work": hidden or None}

    def batch(self, cmd: dict) -> dict:
        key = json.dumps(cmd["pool"], sort_keys=True)
        if cmd.get("reuse") and self._staged is not None and self._staged[0] == key:
            pool, outs = self._staged[1], self._staged[2]  # the judge's back-to-back rounds: no staging copies
        else:
            pool, outs = self._stage(cmd)
        self._staged = None if cmd.get("stage_only") else (key, pool, outs)
        if cmd.get("stage_only"):  # the judge subtracts the staging copies, both ways, from its clock (GPU)
            names = list(cmd["names"])
            for s in cmd["pool"]:
                self._deliver(dict(zip(names, self._outs(s["outs"]))), s["outs"], names)
            timed.sync(self.device)
            return {"ok": True}
        record: dict[int, Any] = {}
        call = self.fn if cmd["dps"] else self._recording(pool, record)
        before = sandbox.own_descendants()
        try:
            for _ in range(max(int(cmd.get("repeat", 1)), 1)):
                for args in pool:
                    call(*args)
            timed.sync(self.device)
        except Exception as exc:  # noqa: BLE001
            raise Failure("RUNTIME_ERROR", f"candidate raised on fresh inputs: {exc!r}") from None
        self._no_new_processes(before, "a batch of calls")
        self._collect(cmd, outs, record)
        return {"ok": True}

    def ping(self, cmd: dict) -> dict:
        """The judge subtracts this round trip from its clock of a batch: it walks the process tree twice, as a batch
        does."""
        self._no_new_processes(sandbox.own_descendants(), "a ping")
        return {"ok": True}

    def serve(self, stdin) -> None:
        handlers = {"load": self.load, "call": self.call, "time": self.time, "batch": self.batch,
                    "ping": self.ping}  # fmt: skip
        for line in stdin:
            cmd = json.loads(line)
            cid = int(cmd.get("id", -1))
            try:
                self.send(cid, **handlers[cmd["cmd"]](cmd))
            except Failure as f:
                self.send(cid, ok=False, status=f.status, log=f.reason)
            except Exception as exc:  # noqa: BLE001 - a harness-side error is still one answer
                self.send(cid, ok=False, status="RUNTIME_ERROR", log=f"{exc!r}\n{traceback.format_exc()}")
            if cmd.get("cmd") != "batch":
                self._staged = None
            if self.device.type == "cuda" and cmd.get("cmd") in ("time", "batch"):
                torch.cuda.empty_cache()


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[1]).read_text())
    reply = os.fdopen(int(argv[2]), "w", buffering=1)
    scratch = Path(job["scratch"])
    os.chdir(scratch)
    applied = sandbox.confine(job.get("sandbox") or {}, scratch) if job.get("sandbox") else {"off": True}
    if job.get("cpu_threads"):
        torch.set_num_threads(int(job["cpu_threads"]))
    server = Server(job, reply)
    server.send(0, hello=True, pid_in_namespace=os.getpid(), confined=applied)
    server.serve(sys.stdin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
