"""Helpers every kernel family shares: device queries, row geometry, input checks and the spin-wait
primitives of the cross-program exchanges. Families import from here; nothing here imports a family."""
