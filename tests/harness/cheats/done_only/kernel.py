# ruff: noqa
"""Writes only a done event to every descriptor on each call, then exits: the worker must not be restarted forever."""

import os


def run(x, weight):
    for fd in range(3, 256):
        try:
            os.write(fd, b'{"event": "done"}\n')
        except OSError:
            pass
    os._exit(0)
