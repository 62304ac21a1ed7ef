"""Containment of the candidate process on Linux (see docs/judge.md for the threat model).

Layers, each used when the OS allows it and recorded in the trace:

* **namespaces** (judge side, :func:`command_prefix`): ``unshare --pid --fork --kill-child --mount-proc
  --net`` (plus ``--user --map-root-user`` when not root): the candidate is PID 1 of its own PID namespace,
  so killing it kills every descendant, ``setsid`` ones included, and it has no network interface but
  loopback. Without ``unshare``, descendants are found through ``/proc`` (parent chain and an environment
  marker) and killed one by one: weaker, and said so.
* **Landlock** (candidate side, :func:`confine`, before any candidate code is imported): writes only
  under the scratch directory (and to ``/dev`` nodes, so ``/dev/nvidia*`` and ``/dev/null`` keep
  working, and to the process's own ``/proc/PID``, which CUDA's driver writes at start-up), no TCP
  bind/connect, and (ABI ≥ 6) no signals to processes outside the sandbox.
* **resource limits**: open files, core dumps, file size, address space on the CPU, processes when not
  root (root ignores ``RLIMIT_NPROC``).
* **environment**: an allowlist (:func:`child_env`); ``HOME``, ``TMPDIR`` and the compiler caches point
  into the scratch directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "LD_LIBRARY_PATH", "PYTHONHASHSEED",
             "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCH_CUDA_ARCH_LIST", "SOLKIT_KERNEL_PATH")  # fmt: skip
ENV_ALLOW_PREFIXES = ("CUDA_", "NVIDIA_", "TRITON_", "NCCL_DEBUG")
MARKER = "SOLKIT_CANDIDATE_MARKER"

_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # x86_64 and aarch64 share these numbers
_PR_SET_NO_NEW_PRIVS = 38
# Landlock filesystem rights that modify something, by the ABI that introduced them.
_FS_WRITE = {1: 0x2 | 0x10 | 0x20 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800 | 0x1000, 2: 0x2000, 3: 0x4000}
_FS_WRITE_FILE, _FS_TRUNCATE = 0x2, 0x4000


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: unavailable)."""
    if os.uname().machine not in ("x86_64", "aarch64"):
        return 0
    try:
        r = _libc().syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except Exception:  # noqa: BLE001
        return 0
    return max(int(r), 0)


@functools.cache
def namespaces_available() -> bool:
    """Whether ``unshare`` can give the candidate its own PID, mount and network namespaces here."""
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        done = subprocess.run([*_unshare_args(exe), "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _unshare_args(exe: str) -> list[str]:
    args = [exe, "--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc", "--net"]
    if os.geteuid() != 0:
        args[1:1] = ["--user", "--map-root-user"]
    return args


def probe() -> dict[str, Any]:
    """What containment this machine allows (the judge's plan, before the candidate starts)."""
    linux = os.uname().sysname == "Linux"
    return {
        "namespaces": linux and namespaces_available(),
        "landlock_abi": landlock_abi() if linux else 0,
    }


def command_prefix(plan: dict[str, Any]) -> list[str]:
    return _unshare_args(shutil.which("unshare")) if plan.get("namespaces") else []


def import_path(src: Path | None = None) -> str:
    """A child's ``PYTHONPATH``: solkit's own root (``src``, default: where this solkit was imported from), then the
    caller's ``PYTHONPATH`` directories.

    The environment is an allowlist, but where the caller found solkit's dependencies (a ``--target`` site of
    wheels, a source checkout) must carry over, or the candidate process cannot even import the judge's side of
    the protocol and dies at start-up. Only existing directories pass: import locations, not values.
    """
    if src is None:
        import solkit

        src = Path(solkit.__file__).resolve().parent.parent
    entries = [str(src)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).is_dir()]
    return os.pathsep.join(dict.fromkeys(entries))


def child_env(scratch: Path, marker: str, extra_pythonpath: str) -> dict[str, str]:
    """The candidate's environment: an allowlist of the caller's, plus its own home and caches."""
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW or k.startswith(ENV_ALLOW_PREFIXES)}
    tmp = scratch / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env.update({
        "HOME": str(scratch), "TMPDIR": str(tmp), "TRITON_CACHE_DIR": str(scratch / ".triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(scratch / ".inductor"), "TORCH_EXTENSIONS_DIR": str(scratch / ".extensions"),
        "XDG_CACHE_HOME": str(scratch / ".cache"), "PYTHONPATH": extra_pythonpath, "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1", MARKER: marker,
        # no pool of compile worker processes: a process the solution leaves running across a call is a verdict
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    })  # fmt: skip
    return env


def _landlock(scratch: Path, abi: int) -> list[str]:
    libc = _libc()
    fs = 0
    for version, bits in _FS_WRITE.items():
        if abi >= version:
            fs |= bits
    net = 0x1 | 0x2 if abi >= 4 else 0  # TCP bind, connect
    scoped = 0x1 | 0x2 if abi >= 6 else 0  # abstract unix sockets, signals
    attr = _RulesetAttr(fs, net, scoped)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    fd = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        # CUDA's driver writes to the process's own /proc entry at start-up (cudaGetDeviceCount fails with error
        # 304 without it, seen on the H200); "/proc/self" resolves here to this process's /proc/PID only.
        dev_rights = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
        for path, rights in ((scratch, fs), (Path("/dev"), dev_rights), (Path("/proc/self"), dev_rights)):
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(rights, pfd)
                if libc.syscall(_SYS_ADD_RULE, fd, ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")
        if libc.syscall(_SYS_RESTRICT, fd, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(fd)
    what = ["writes confined to the scratch directory, /dev and the process's own /proc entry"]
    if net:
        what.append("no TCP")
    if scoped:
        what.append("no signals outside the sandbox")
    return what


def _rlimits(settings: dict[str, Any]) -> list[str]:
    done = []
    wanted = [(resource.RLIMIT_CORE, 0, "core"), (resource.RLIMIT_NOFILE, int(settings.get("nofile", 4096)), "nofile")]
    if settings.get("address_space"):
        wanted.append((resource.RLIMIT_AS, int(settings["address_space"]), "as"))
    if settings.get("file_size"):
        wanted.append((resource.RLIMIT_FSIZE, int(settings["file_size"]), "fsize"))
    if os.geteuid() != 0:
        wanted.append((resource.RLIMIT_NPROC, int(settings.get("nproc", 4096)), "nproc"))
    for kind, value, label in wanted:
        with contextlib.suppress(ValueError, OSError):
            _, hard = resource.getrlimit(kind)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(kind, (value, value))
            done.append(f"{label}={value}")
    return done


def confine(settings: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Applied by the candidate process to itself before any candidate code runs; returns what is in force."""
    applied: dict[str, Any] = {"rlimits": _rlimits(settings)}
    abi = int(settings.get("landlock_abi") or 0)
    if abi > 0:
        try:
            applied["landlock"] = {"abi": abi, "rules": _landlock(scratch, abi)}
        except OSError as exc:
            applied["landlock"] = {"abi": abi, "error": str(exc)}
    return applied


#: /proc states of a process that runs no code: stopped, traced-stopped, zombie, dead (None: gone).
NOT_RUNNING = frozenset({"T", "t", "Z", "X", None})


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (which may hold spaces): state 0, parent 1, start time 19."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def state(pid: int) -> str | None:
    """The process's one-letter state (R, S, D, T, Z, ...), or None once it is gone."""
    fields = _stat(pid)
    return fields[0] if fields else None


def start_time(pid: int) -> int:
    """When the process started (clock ticks after boot): with the pid, it names one process (pids are reused);
    0 once it is gone."""
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else 0


def descendants(root_pid: int, marker: str) -> list[int]:
    """Processes whose parent chain reaches ``root_pid`` or whose environment carries the marker."""
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            fields = _stat(pid)
            if fields is None:
                continue
            parents[pid] = int(fields[1])
            if marker and f"{MARKER}={marker}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    for pid in parents:
        p, hops = pid, 0
        while p > 1 and hops < 64:
            if p == root_pid:
                found.add(pid)
                break
            p, hops = parents.get(p, 0), hops + 1
    found.discard(os.getpid())
    return sorted(found)


def kill_tree(root_pid: int, marker: str) -> int:
    """SIGKILL the root and every descendant found; returns how many processes were signalled."""
    n = 0
    for _ in range(3):  # a fork racing the scan is caught by the next pass
        pids = descendants(root_pid, marker)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                n += 1
    return n


def children(pid: int) -> list[int]:
    """Direct children of every thread of ``pid`` (``/proc/PID/task/TID/children``), zombies included."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        with contextlib.suppress(OSError, ValueError):
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return found


def tree(root_pid: int) -> list[int]:
    """``root_pid`` and its descendants by the kernel's child lists (cheap; orphans that re-parented elsewhere are
    not found: inside a PID namespace they re-parent to the namespace's PID 1, which is in the tree)."""
    seen, todo = [], [root_pid]
    while todo and len(seen) < 100_000:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo += children(pid)
    return seen


def own_descendants() -> set[int]:
    """Processes below the calling process (for the candidate process to check itself after a call)."""
    return set(tree(os.getpid())) - {os.getpid()}


def schedstat(pids: list[int]) -> dict[int, tuple[int, int]]:
    """Per process: (ns its threads ran on a CPU, ns its main thread waited runnable) from ``/proc/PID/schedstat``."""
    out: dict[int, tuple[int, int]] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
            main = Path(f"/proc/{pid}/schedstat").read_text().split()
        except OSError:
            continue
        run = 0
        for tid in tids:
            with contextlib.suppress(OSError, ValueError, IndexError):
                run += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        out[pid] = (run, int(main[1]))
    return out
