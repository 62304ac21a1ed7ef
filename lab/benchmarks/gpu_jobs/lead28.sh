# budget: 120
# Session 7 (lead): GPU tests of the softmax rows path after rows_options moved onto path_options.
set -u
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_rows.py 2>&1 | tail -n 6
