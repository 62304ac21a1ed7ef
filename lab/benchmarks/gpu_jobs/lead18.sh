# budget: 120
# Session 7: Nsight Compute (--set full) of the default wide softmax forwards (8192x128256 TMA path, 8192x14336
# rows path; the second call of each, clocks not locked), for the diagnosis of the vocabulary-wide forward's last 10 %.
set -u
NCU=$(python3 -c "from solkit.profile.ncu import find_ncu; print(find_ncu() or '')")
echo "ncu: $NCU"; [ -n "$NCU" ] || exit 3
"$NCU" --version | tail -1
timeout 110 "$NCU" --target-processes all --kernel-name "regex:_softmax_fwd_(tma|rows)" --clock-control none \
  --launch-skip 2 --launch-count 2 --set full --csv --page details python3 lab/benchmarks/softmax_ncu_target.py \
  > "$OUT/ncu_details.csv" 2> "$OUT/ncu.err"
echo "rc=$?"; wc -l "$OUT/ncu_details.csv"; tail -5 "$OUT/ncu.err"
grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Dynamic Shared|No Eligible|Issued Warp" \
  "$OUT/ncu_details.csv" | cut -c1-400 | head -60
timeout 60 "$NCU" --target-processes all --kernel-name "regex:_softmax_fwd_(tma|rows)" --clock-control none \
  --launch-skip 2 --launch-count 2 --section WarpStateStats --section MemoryWorkloadAnalysis_Tables \
  --section SchedulerStats --csv --page raw python3 lab/benchmarks/softmax_ncu_target.py > "$OUT/ncu_raw.csv" 2>> "$OUT/ncu.err"
echo "rc=$?"; wc -l "$OUT/ncu_raw.csv"
