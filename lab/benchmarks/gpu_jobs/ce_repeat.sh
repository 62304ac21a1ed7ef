#!/usr/bin/env bash
# budget: 150
# The cross-entropy rows of `solkit bench --size l` (solkit, compile, vendor), run twice in one device call:
# checks whether the 70B row's +2.3 % of 2026-12-02 (after the capability model) is real or run-to-run noise.
set -u
for i in 1 2; do
  python3 -m solkit.cli bench --size l --ops cross_entropy --backends solkit,compile,vendor \
    --out "$OUT/run$i" 2>&1 | tail -n 25
done
