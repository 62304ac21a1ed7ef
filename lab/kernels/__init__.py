"""Kernels that were built and measured but are never dispatched by default."""
