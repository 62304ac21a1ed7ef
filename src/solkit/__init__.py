"""solkit: measure every GPU operator against the speed of light (SOL) of the hardware it runs on."""

__version__ = "0.1.0"

# solkit.patch / solkit.unpatch load torch and the kernels on first use, so `import solkit` stays light.
_LAZY = {"patch": "solkit.swap", "unpatch": "solkit.swap"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'solkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
