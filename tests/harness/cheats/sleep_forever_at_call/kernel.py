# ruff: noqa
"""Hangs in every call: one restart, then every remaining workload fails without waiting again."""

import time


def run(x, weight):
    while True:
        time.sleep(0.1)
