"""A level file that imports a module nobody has."""

import solkit_no_such_module  # noqa: F401
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return []


def get_init_inputs():
    return []
