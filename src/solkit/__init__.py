"""solkit: measure every GPU operator against the speed of light (SOL) of the hardware it runs on."""

__version__ = "0.1.0"
