"""GPUs of an Nsight Systems export (TARGET_INFO_GPU), keyed by the CUDA device ordinal each traced process saw
(TARGET_INFO_CUDA_DEVICE where the export has it)."""

from __future__ import annotations

from collections.abc import Sequence

from traceinsight.ingest.base import Columns
from traceinsight.ingest.nsys_export import CUDA_DEVICE_TABLE, GPU_TABLE
from traceinsight.ingest.nsys_query import ExportReader
from traceinsight.ingest.nsys_sql import I32, I64, int_sql, text_sql


def devices(reader: ExportReader) -> None:
    """GPU properties from TARGET_INFO_GPU, keyed by the CUDA device ordinal the activity tables use."""
    if GPU_TABLE not in reader.tables:
        reader.ingest.warnings.append(f"no {GPU_TABLE} table: GPU properties unknown")
        return
    t = GPU_TABLE

    # Capacities must be positive: a zero or negative SM count or warp size is damage, read as unknown.
    def i32(n: str) -> str:
        return reader.int_col(t, n, I32)

    def i64(n: str) -> str:
        return reader.int_col(t, n)

    def pos32(n: str) -> str:
        return reader.int_col(t, n, (1, I32[1]))

    def pos64(n: str) -> str:
        return reader.int_col(t, n, (1, I64[1]))

    fields = {
        "_gpu_id": i64("id"),
        "_cu_device": i32("cuDevice"),
        "name": text_sql(reader.col(t, "name")),
        "num_sms": pos32("smCount"),
        "compute_major": reader.int_col(t, "computeMajor", (0, I32[1])),
        "compute_minor": reader.int_col(t, "computeMinor", (0, I32[1])),
        "regs_per_sm": pos32("maxRegistersPerSm"),
        "regs_per_block": pos32("maxRegistersPerBlock"),
        "smem_per_sm_bytes": pos64("maxShmemPerSm"),
        "smem_per_block_optin_bytes": pos64("maxShmemPerBlockOptin"),
        "max_threads_per_block": pos32("maxThreadsPerBlock"),
        "max_blocks_per_sm": pos32("maxBlocksPerSm"),
        "max_warps_per_sm": pos32("maxWarpsPerSm"),
        "warp_size": pos32("threadsPerWarp"),
        "total_mem_bytes": pos64("totalMemory"),
        "mem_bandwidth_bytes_per_s": pos64("memoryBandwidth"),
        "clock_hz": pos64("clockRate"),
        "l2_bytes": pos64("l2CacheSize"),
    }
    rows = reader.con.execute(f"SELECT {', '.join(fields.values())} FROM {t} ORDER BY {fields['_gpu_id']}")
    gpus = [dict(zip(fields, r, strict=True)) for r in rows]
    # TARGET_INFO_CUDA_DEVICE maps a GPU (TARGET_INFO_GPU.id) to the ordinal each traced process saw it as;
    # where it maps any GPU, GPUs it leaves out were not used. Older exports lack it: then cuDevice, else id.
    ordinals: dict[int, list[int]] = {}
    if CUDA_DEVICE_TABLE in reader.tables and {"gpuId", "cudaId"} <= reader.columns(CUDA_DEVICE_TABLE):
        gpu_id, cuda_id = int_sql('"gpuId"'), int_sql('"cudaId"', I32)
        for g, cuda in reader.con.execute(
            f"SELECT DISTINCT {gpu_id}, {cuda_id} FROM {CUDA_DEVICE_TABLE} "
            f"WHERE {gpu_id} IS NOT NULL AND {cuda_id} IS NOT NULL ORDER BY 1, 2"
        ):
            ordinals.setdefault(g, []).append(cuda)
    names = ["device_id", *[f for f in fields if not f.startswith("_")], "max_threads_per_sm"]
    cols: Columns = {n: [] for n in names}
    seen: dict[int, str] = {}
    for gpu in gpus:
        ids: Sequence[int | None]
        if ordinals:
            ids = ordinals.get(gpu["_gpu_id"], [])
        else:
            own = gpu["_cu_device"] if gpu["_cu_device"] is not None else gpu["_gpu_id"]
            ids = [own if own is not None and I32[0] <= own <= I32[1] else None]
        for device_id in ids:
            if device_id is None:
                continue
            if device_id in seen:
                if seen[device_id] != gpu["name"]:
                    reader.ingest.warnings.append(
                        f"two GPUs ({seen[device_id]}, {gpu['name']}) as CUDA device {device_id} "
                        "(in different processes); kept the first"
                    )
                continue
            seen[device_id] = gpu["name"]
            warps, warp = gpu["max_warps_per_sm"], gpu["warp_size"]
            threads = warps * warp if warps is not None and warp is not None else None
            row = {
                **gpu,
                "device_id": device_id,
                "max_threads_per_sm": threads if threads is not None and I32[0] <= threads <= I32[1] else None,
            }
            for n in names:
                cols[n].append(row[n])
    reader.ingest.tables["devices"] = cols
