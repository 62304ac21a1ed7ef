# ruff: noqa
"""Returns the input tensor itself (an aliased output)."""


def run(x, weight):
    return x
