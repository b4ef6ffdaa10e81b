"""The details page of an Nsight Compute CSV export (`ncu --csv`, ncu's default): one row per kernel and metric,
named for display, stored under the raw metric names ncu's sections compute them from; the SM workload-imbalance
rule read into sm__cycles_active.min/max."""

from __future__ import annotations

import re
from typing import Any

from traceinsight.ingest.ncu_cells import normalize_unit, parse_number

# Details-page metric (section, display name) -> the raw metric ncu's section files compute it from (ncu 2023-2025
# sections SpeedOfLight, LaunchStats, Occupancy, WorkloadDistribution; the raw names are those of the raw page,
# e.g. ../shared/traces/h200/flashinfer_decode.ncu.csv). A display name not listed is kept as "<section>: <name>".
_SOL = "GPU Speed Of Light Throughput"
_LAUNCH = "Launch Statistics"
_OCC = "Occupancy"
_WLD = "GPU and Memory Workload Distribution"
DETAILS_METRICS: dict[tuple[str, str], str] = {
    (_SOL, "Duration"): "gpu__time_duration.sum",
    (_SOL, "Elapsed Cycles"): "gpc__cycles_elapsed.max",
    (_SOL, "SM Active Cycles"): "sm__cycles_active.avg",
    (_SOL, "SM Frequency"): "gpc__cycles_elapsed.avg.per_second",
    (_SOL, "DRAM Frequency"): "dram__cycles_elapsed.avg.per_second",
    (_SOL, "Memory Throughput"): "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "DRAM Throughput"): "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "L1/TEX Cache Throughput"): "l1tex__throughput.avg.pct_of_peak_sustained_active",
    (_SOL, "L2 Cache Throughput"): "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "Compute (SM) Throughput"): "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    (_LAUNCH, "Block Size"): "launch__block_size",
    (_LAUNCH, "Grid Size"): "launch__grid_size",
    (_LAUNCH, "Registers Per Thread"): "launch__registers_per_thread",
    (_LAUNCH, "Shared Memory Configuration Size"): "launch__shared_mem_config_size",
    (_LAUNCH, "Driver Shared Memory Per Block"): "launch__shared_mem_per_block_driver",
    (_LAUNCH, "Dynamic Shared Memory Per Block"): "launch__shared_mem_per_block_dynamic",
    (_LAUNCH, "Static Shared Memory Per Block"): "launch__shared_mem_per_block_static",
    (_LAUNCH, "Threads"): "launch__thread_count",
    (_LAUNCH, "Waves Per SM"): "launch__waves_per_multiprocessor",
    (_LAUNCH, "# SMs"): "launch__sm_count",
    (_LAUNCH, "# TPCs"): "launch__tpc_count",
    (_LAUNCH, "Stack Size"): "launch__stack_size",
    (_LAUNCH, "Cluster Size"): "launch__cluster_size",
    (_LAUNCH, "Uses Green Context"): "launch__uses_green_context",
    (_LAUNCH, "Function Cache Configuration"): "launch__func_cache_config",
    (_LAUNCH, "Cluster Scheduling Policy"): "launch__cluster_scheduling_policy",
    (_OCC, "Block Limit SM"): "launch__occupancy_limit_blocks",
    (_OCC, "Block Limit Registers"): "launch__occupancy_limit_registers",
    (_OCC, "Block Limit Shared Mem"): "launch__occupancy_limit_shared_mem",
    (_OCC, "Block Limit Warps"): "launch__occupancy_limit_warps",
    (_OCC, "Block Limit Barriers"): "launch__occupancy_limit_barriers",
    (_OCC, "Max Active Clusters"): "launch__cluster_max_active",
    (_OCC, "Max Cluster Size"): "launch__cluster_max_potential_size",
    (_OCC, "Cluster Occupancy"): "launch__occupancy_cluster_pct",
    (_OCC, "Theoretical Active Warps per SM"): "sm__maximum_warps_avg_per_active_cycle",
    (_OCC, "Theoretical Occupancy"): "sm__maximum_warps_per_active_cycle_pct",
    (_OCC, "Achieved Occupancy"): "sm__warps_active.avg.pct_of_peak_sustained_active",
    (_OCC, "Achieved Active Warps Per SM"): "sm__warps_active.avg.per_cycle_active",
    (_WLD, "Average SM Active Cycles"): "sm__cycles_active.avg",
    (_WLD, "Total SM Elapsed Cycles"): "sm__cycles_elapsed.sum",
    (_WLD, "Average SMSP Active Cycles"): "smsp__cycles_active.avg",
    (_WLD, "Total SMSP Elapsed Cycles"): "smsp__cycles_elapsed.sum",
    (_WLD, "Average L1 Active Cycles"): "l1tex__cycles_active.avg",
    (_WLD, "Total L1 Elapsed Cycles"): "l1tex__cycles_elapsed.sum",
    (_WLD, "Average L2 Active Cycles"): "lts__cycles_active.avg",
    (_WLD, "Total L2 Elapsed Cycles"): "lts__cycles_elapsed.sum",
    (_WLD, "Average DRAM Active Cycles"): "dram__cycles_active.avg",
    (_WLD, "Total DRAM Elapsed Cycles"): "dram__cycles_elapsed.sum",
}
_RAW_METRIC = re.compile(r"^[a-z0-9]+__[A-Za-z0-9_.]+$")  # `--metrics` rows carry the raw name itself
# The WorkloadImbalance rule of the WorkloadDistribution section: "One or more SMs have a much lower number of
# active cycles than the average number of active cycles. Maximum instance value is 6.23% above the average, while
# the minimum instance value is 40.85% below the average."
_IMBALANCE = re.compile(
    r"One or more SMs have .*?Maximum instance value is ([\d.]+)% above the average, while the minimum instance "
    r"value is ([\d.]+)% below the average"
)


def details_metric_name(section: str, name: str) -> str:
    """The raw metric name of a details-page row, or "<section>: <name>" where ncu's sections do not say."""
    if _RAW_METRIC.match(name):
        return name
    return DETAILS_METRICS.get((section, name), f"{section}: {name}")


def add_details_metric(
    metrics: dict[str, list[Any]],
    imbalance: dict[int, dict[str, float]],
    stored: set[tuple[int, str]],
    ncu_id: int,
    row: list[str],
    col: dict[str, int],
) -> None:
    """One details-page row: a metric, or a rule result (only the SM workload-imbalance rule is read)."""
    section, name, text = row[col["Section Name"]], row[col["Metric Name"]], row[col["Metric Value"]]
    if not name.strip():
        rule = col.get("Rule Description")
        m = _IMBALANCE.search(row[rule]) if rule is not None else None
        if m:
            imbalance.setdefault(ncu_id, {}).update(above=float(m[1]), below=float(m[2]))
        return
    if not text.strip():
        return
    metric = details_metric_name(section, name)
    if (ncu_id, metric) in stored:
        return  # the same metric shown in two sections (SM Active Cycles: Speed Of Light and Workload Distribution)
    stored.add((ncu_id, metric))
    unit, value = normalize_unit(row[col["Metric Unit"]] if "Metric Unit" in col else "", parse_number(text))
    metrics["ncu_id"].append(ncu_id)
    metrics["metric"].append(metric)
    metrics["unit"].append(unit)
    metrics["value"].append(value)
    metrics["text"].append(text)
    if metric == "sm__cycles_active.avg" and value is not None:
        imbalance.setdefault(ncu_id, {})["avg"] = value


def add_imbalance(metrics: dict[str, list[Any]], imbalance: dict[int, dict[str, float]]) -> None:
    """sm__cycles_active.min/max from the WorkloadImbalance rule's percentages and the average SM active cycles.

    ncu's two percentages have different bases: "maximum instance value is A% above the average" is
    (max - avg) / max, "minimum ... B% below the average" is (avg - min) / avg. So max = avg / (1 - A/100) and
    min = avg * (1 - B/100). Checked on the H200 capture of one FlashInfer sweep on both pages
    (tests/data/h200_ncu/): a decode launch with average 945,320 cycles and "93.01% above" has max 13,523,892 by
    this reading, the raw page of the same case 13,522,445 (avg * 1.9301 would give 1,824,562); an FA2 launch,
    1,759,293 vs 1,759,620.
    The rule reports them only where ncu's rule fires, which is not every imbalanced kernel (in that capture it
    did not fire for the most imbalanced decode launch, avg/max 0.035 on the raw page); elsewhere min and max stay
    unknown (not invented): capture `--metrics sm__cycles_active.min,sm__cycles_active.max` beside the sections
    for every kernel. Raw-page and `--metrics` values win: nothing is added for a kernel that already has them.
    """
    have = {(i, m) for i, m in zip(metrics["ncu_id"], metrics["metric"], strict=True)}
    for ncu_id, d in imbalance.items():
        if "avg" not in d or "above" not in d or not d["above"] < 100:
            continue
        for metric, value, how in (
            ("sm__cycles_active.max", d["avg"] / (1 - d["above"] / 100), f"+{d['above']}% of the maximum"),
            ("sm__cycles_active.min", d["avg"] * (1 - d["below"] / 100), f"-{d['below']}%"),
        ):
            if (ncu_id, metric) in have:
                continue
            metrics["ncu_id"].append(ncu_id)
            metrics["metric"].append(metric)
            metrics["unit"].append("cycle")
            metrics["value"].append(value)
            metrics["text"].append(f"average SM active cycles {how} (WorkloadImbalance rule)")
