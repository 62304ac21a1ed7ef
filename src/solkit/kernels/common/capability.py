"""The capability model: what a device offers (:class:`DeviceCaps`), what a kernel path needs (:class:`Needs`),
and the rule that picks a path (:func:`choose`).

A dispatcher lists its paths fastest first, each with its :class:`Needs`, and the portable Triton path (no
compute-capability or feature needs) last; :func:`choose` takes the first path the device meets and says in
one line per skipped path why it was skipped. So a path is never taken on a device that does not meet its
needs, and the portable path is always there.

A device's capabilities come from the hardware database (``solkit.hardware``: per-compute-capability limits
and features, per-product SM count and L2), or from a live torch device (its properties first, the database
for what torch does not report). The CPU and Triton's interpreter get :data:`INTERPRETER_CAPS`: no compute
capability and no features, so only portable paths run there.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import torch

from solkit.errors import SolkitError
from solkit.hardware.specs import cc_limits, get_spec, match_spec
from solkit.kernels.common.device import interpreting

CC = tuple[int, int]


def as_cc(value: CC | str | int | None) -> CC | None:
    """A compute capability as ``(major, minor)`` from ``(9, 0)``, ``"9.0"``, ``"sm_90"`` or ``90``."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return (int(value[0]), int(value[1]))
    if isinstance(value, int):
        return divmod(value, 10)
    text = str(value).strip().lower().removeprefix("sm_").rstrip("a")
    if "." in text:
        major, minor = text.split(".", 1)
        return (int(major), int(minor))
    if text.isdigit():
        return divmod(int(text), 10)
    raise SolkitError(f"compute capability {value!r} not understood; write it as 9.0, sm_90 or 90")


def cc_text(cc: CC | None) -> str:
    return f"sm_{cc[0]}{cc[1]}" if cc else "the interpreter"


@dataclass(frozen=True)
class DeviceCaps:
    """What one device (or product) offers a kernel. ``cc`` is None for the CPU interpreter, which also has no
    shared-memory or register limits (``None``)."""

    name: str  # hardware-database id, a device name, or "interpreter"
    cc: CC | None
    sm_count: int
    smem_per_block: int | None  # bytes, the opt-in maximum of one program
    smem_per_sm: int | None
    regs_per_sm: int | None  # 32-bit registers
    l2_bytes: int | None
    has_tma: bool = False
    has_wgmma: bool = False
    gluon_hopper: bool = False
    max_regs_per_thread: int | None = 255
    source: str = "db"  # "db", "device" (properties, db for features) or "interpreter"

    @property
    def is_interpreter(self) -> bool:
        return self.cc is None

    @property
    def sm(self) -> int | None:
        """The compute capability as one number (90 for sm_90), None for the interpreter."""
        return self.cc[0] * 10 + self.cc[1] if self.cc else None


#: The CPU and Triton's interpreter: no compute capability, no features, no shared-memory limit; 4 "SMs" as
#: :func:`solkit.kernels.common.device.sm_count` reports on the CPU.
INTERPRETER_CAPS = DeviceCaps(
    name="interpreter", cc=None, sm_count=4, smem_per_block=None, smem_per_sm=None, regs_per_sm=None,
    l2_bytes=None, max_regs_per_thread=None, source="interpreter",
)  # fmt: skip


def _features_by_rule(cc: CC) -> tuple[bool, bool, bool]:
    """(TMA, wgmma, Gluon Hopper ops) for a capability the database lacks: TMA from sm_90 on; wgmma and the
    Gluon Hopper ops on sm_90 only (sm_90a instructions, not carried forward to sm_100 or sm_120)."""
    return cc >= (9, 0), cc == (9, 0), cc == (9, 0)


def caps_for_cc(
    cc: CC | str | int, *, name: str | None = None, sm_count: int, l2_bytes: int | None = None
) -> DeviceCaps:
    """Capabilities of a compute capability from the database's per-cc table (SM count and L2 given)."""
    c = as_cc(cc)
    lim = cc_limits(f"{c[0]}.{c[1]}")
    if lim is None:
        raise SolkitError(
            f"no per-SM limits for {cc_text(c)} in the hardware database; add a compute_capabilities entry"
        )
    return DeviceCaps(
        name=name or cc_text(c), cc=c, sm_count=int(sm_count),
        smem_per_block=int(lim.smem_per_block_bytes.value), smem_per_sm=int(lim.smem_per_sm_bytes.value),
        regs_per_sm=int(lim.regs_per_sm.value), l2_bytes=int(l2_bytes) if l2_bytes else None,
        has_tma=lim.tma.value, has_wgmma=lim.wgmma.value, gluon_hopper=lim.gluon_hopper.value,
        max_regs_per_thread=int(lim.max_regs_per_thread.value), source="db",
    )  # fmt: skip


def caps_for_product(product_id: str) -> DeviceCaps:
    """Capabilities of a hardware-database product (``"h200-sxm"``, ``"rtx-4090"``); NVIDIA products only."""
    spec = get_spec(product_id)
    if spec.vendor != "nvidia":
        raise SolkitError(f"{spec.id} is a {spec.vendor} product: the capability model covers NVIDIA GPUs only")
    return caps_for_cc(spec.compute_capability, name=spec.id, sm_count=int(spec.sm_count.value),
                       l2_bytes=int(spec.l2_bytes.value))  # fmt: skip


def caps_for_device(device: torch.device | str | int | None = None) -> DeviceCaps:
    """Capabilities of a live device: its torch properties, the database for features and for what torch does
    not report. The CPU, or any device while Triton interprets, gives :data:`INTERPRETER_CAPS`."""
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    elif isinstance(device, int):
        device = torch.device("cuda", device)
    else:
        device = torch.device(device)
    if device.type != "cuda" or interpreting() or not torch.cuda.is_available():
        return INTERPRETER_CAPS
    p = torch.cuda.get_device_properties(device)
    cc = (int(p.major), int(p.minor))
    spec = match_spec(p.name, p.multi_processor_count, p.total_memory)
    try:
        caps = caps_for_cc(cc, name=spec.id if spec else p.name, sm_count=p.multi_processor_count)
    except SolkitError:  # a capability the database lacks: features by rule, limits from the properties
        tma, wgmma, gluon = _features_by_rule(cc)
        caps = DeviceCaps(name=p.name, cc=cc, sm_count=p.multi_processor_count, smem_per_block=None,
                          smem_per_sm=None, regs_per_sm=None, l2_bytes=None, has_tma=tma, has_wgmma=wgmma,
                          gluon_hopper=gluon)  # fmt: skip
    measured = {
        "smem_per_block": getattr(p, "shared_memory_per_block_optin", None),
        "smem_per_sm": getattr(p, "shared_memory_per_multiprocessor", None),
        "regs_per_sm": getattr(p, "regs_per_multiprocessor", None),
        "l2_bytes": getattr(p, "L2_cache_size", None),
    }
    return replace(caps, source="device", **{k: int(v) for k, v in measured.items() if v})


#: ``SOLKIT_KERNEL_PATH=portable`` makes every dispatcher take its portable path (a correctness check of that
#: path on a device that would otherwise never run it, and a way around a fast path that misbehaves).
PATH_ENV = "SOLKIT_KERNEL_PATH"
_SIMULATED: contextvars.ContextVar[DeviceCaps | None] = contextvars.ContextVar("solkit_simulated_caps", default=None)
_PORTABLE: contextvars.ContextVar[bool] = contextvars.ContextVar("solkit_portable_only", default=False)


@contextlib.contextmanager
def simulate(caps: DeviceCaps) -> Iterator[DeviceCaps]:
    """Within the block, :func:`device_caps` answers ``caps`` for every device: what a dispatcher would choose
    on another product, asked without that product (the compile checks and the dispatch tests use it)."""
    token = _SIMULATED.set(caps)
    try:
        yield caps
    finally:
        _SIMULATED.reset(token)


@contextlib.contextmanager
def portable_only() -> Iterator[None]:
    """Within the block, :func:`choose` takes the portable path whatever the device offers."""
    token = _PORTABLE.set(True)
    try:
        yield
    finally:
        _PORTABLE.reset(token)


def forced_portable() -> bool:
    """True inside :func:`portable_only` or with ``SOLKIT_KERNEL_PATH=portable``."""
    return _PORTABLE.get() or os.environ.get(PATH_ENV, "").strip().lower() == "portable"


@functools.cache
def _live_caps(index: int) -> DeviceCaps:
    return caps_for_device(index)


def device_caps(where: torch.Tensor | torch.device | str | int | None = None) -> DeviceCaps:
    """The capabilities a dispatcher plans for: those simulated by :func:`simulate` if any, else the live
    device's (cached per device), else :data:`INTERPRETER_CAPS` on the CPU and under the interpreter."""
    simulated = _SIMULATED.get()
    if simulated is not None:
        return simulated
    device = where.device if isinstance(where, torch.Tensor) else where
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda" or interpreting() or not torch.cuda.is_available():
        return INTERPRETER_CAPS
    return _live_caps(device.index if device.index is not None else torch.cuda.current_device())


@dataclass(frozen=True)
class Needs:
    """What one kernel path needs of the device. The default (no needs) is the portable Triton path.

    ``min_cc`` inclusive, ``max_cc`` exclusive (``max_cc=(10, 0)`` keeps a path on Hopper-class parts);
    ``smem_bytes`` the shared memory of one program at its configuration; ``max_regs`` the registers per thread
    it is compiled to use (with ``warps``, also checked per program against the register file).
    """

    min_cc: CC | str | int | None = None
    max_cc: CC | str | int | None = None
    tma: bool = False
    wgmma: bool = False
    gluon: bool = False
    smem_bytes: int = 0
    max_regs: int | None = None
    warps: int | None = None
    note: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "min_cc", as_cc(self.min_cc))
        object.__setattr__(self, "max_cc", as_cc(self.max_cc))

    @property
    def portable(self) -> bool:
        """No compute-capability or feature needs: runs on every NVIDIA part and in the interpreter."""
        return self.min_cc is None and self.max_cc is None and not (self.tma or self.wgmma or self.gluon)


def unmet(needs: Needs, caps: DeviceCaps) -> list[str]:
    """Why ``caps`` cannot run a path with ``needs``, one short reason each; empty when every need is met."""
    out: list[str] = []
    where = cc_text(caps.cc) if caps.cc else "the interpreter"
    if needs.min_cc is not None and (caps.cc is None or caps.cc < needs.min_cc):
        out.append(f"needs {cc_text(needs.min_cc)} or later, {where} is not")
    if needs.max_cc is not None and (caps.cc is None or caps.cc >= needs.max_cc):
        out.append(f"needs a part below {cc_text(needs.max_cc)}, {where} is not")
    for wanted, have, what in (
        (needs.tma, caps.has_tma, "TMA"),
        (needs.wgmma, caps.has_wgmma, "wgmma"),
        (needs.gluon, caps.gluon_hopper, "Gluon's Hopper ops"),
    ):
        if wanted and not have:
            out.append(f"needs {what}, {where} has none")
    if caps.smem_per_block is not None and needs.smem_bytes > caps.smem_per_block:
        out.append(f"needs {needs.smem_bytes} B of shared memory per program, {where} allows {caps.smem_per_block}")
    if needs.max_regs is not None and caps.max_regs_per_thread is not None:
        if needs.max_regs > caps.max_regs_per_thread:
            out.append(f"needs {needs.max_regs} registers per thread, {where} allows {caps.max_regs_per_thread}")
        elif needs.warps and caps.regs_per_sm is not None and needs.max_regs * 32 * needs.warps > caps.regs_per_sm:
            out.append(
                f"needs {needs.max_regs * 32 * needs.warps} registers per program, {where} has {caps.regs_per_sm}"
            )
    return out


def reasons_against(needs: Needs, caps: DeviceCaps, portable_forced: bool | None = None) -> list[str]:
    """Why a path with ``needs`` is not taken on ``caps``: its unmet needs, plus the forcing of the portable path
    (:func:`portable_only`, ``SOLKIT_KERNEL_PATH=portable``) for a path that is not portable. Empty: it may run."""
    reasons = unmet(needs, caps)
    if (forced_portable() if portable_forced is None else portable_forced) and not needs.portable:
        reasons.append(f"the portable path is forced ({PATH_ENV}=portable)")
    return reasons


def choose(paths: Sequence[tuple[str, Needs]], caps: DeviceCaps) -> tuple[str, dict[str, list[str]]]:
    """The first path (fastest first) whose needs ``caps`` meets, and the reasons each earlier path was skipped.
    Under :func:`portable_only` (or ``SOLKIT_KERNEL_PATH=portable``) every non-portable path is skipped.

    The last path must be portable (:attr:`Needs.portable`), so one always exists; if even its shared memory or
    registers do not fit, a SolkitError names every reason.
    """
    if not paths:
        raise SolkitError("choose: no paths given")
    last_name, last = paths[-1]
    if not last.portable:
        raise SolkitError(f"choose: the last path ({last_name}) must be the portable one (no cc or feature needs)")
    skipped: dict[str, list[str]] = {}
    portable_forced = forced_portable()
    for name, needs in paths:
        reasons = reasons_against(needs, caps, portable_forced)
        if not reasons:
            return name, skipped
        skipped[name] = reasons
    detail = "; ".join(f"{n}: {', '.join(r)}" for n, r in skipped.items())
    raise SolkitError(f"no path runs on {caps.name}: {detail}")


@functools.lru_cache(maxsize=256)
def _allowed_names(paths: tuple[tuple[str, Needs], ...], caps: DeviceCaps, forced: bool) -> tuple[str, ...]:
    return tuple(name for name, needs in paths if not unmet(needs, caps) and (needs.portable or not forced))


def allowed(paths: Sequence[tuple[str, Needs]], caps: DeviceCaps, kernel: str = "kernel") -> tuple[str, ...]:
    """The names of ``paths`` whose needs ``caps`` meets, in their order (under :func:`portable_only`, the
    portable ones only): the set a dispatcher's own shape rules choose among; the first is :func:`choose`'s.
    None met: a SolkitError naming ``kernel``, the device and every path's reasons (one line)."""
    forced = forced_portable()
    try:  # dispatchers ask on every launch: the answer is cached, since paths, caps and the flag are immutable
        names = _allowed_names(tuple(paths), caps, forced)
    except TypeError:  # an unhashable paths sequence (a test's list of lists): work it out each time
        names = tuple(name for name, needs in paths if not unmet(needs, caps) and (needs.portable or not forced))
    if not names:
        detail = "; ".join(f"{n}: {', '.join(unmet(nd, caps)) or 'not portable'}" for n, nd in paths)
        raise SolkitError(f"{kernel}: no path runs on {caps.name}: {detail}")
    return names
