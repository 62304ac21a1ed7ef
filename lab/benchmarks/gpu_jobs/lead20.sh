# budget: 150
# Session 7: the TMA softmax forward's extra DRAM reads against its L2 prefetch distance / stages / programs per SM
# (lab/benchmarks/softmax_tma_l2probe.py): harness timings, then Nsight Compute DRAM bytes, L2 throughput and the
# cross-partition (ltcfabric) sectors of the copy and of every variant.
set -u
cd benchmarks
timeout 80 python3 softmax_tma_l2probe.py --out "$OUT/l2probe.json" 2>&1 | tail -n 20
NCU=$(python3 -c "from solkit.profile.ncu import find_ncu; print(find_ncu() or '')")
timeout 60 "$NCU" --target-processes all --kernel-name "regex:softmax_fwd_tma|elementwise" --clock-control none \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sector_op_read_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum \
  --csv --page raw python3 softmax_tma_l2probe.py --ncu-target > "$OUT/ncu_l2probe.csv" 2> "$OUT/ncu.err"
echo "ncu rc=$?"; tail -n 3 "$OUT/ncu.err"; wc -l "$OUT/ncu_l2probe.csv"
