"""What an Nsight Systems SQLite export (`nsys export --type sqlite`, schemas 2.x and 3.x) holds: the names of its
tables, the ids of the enum values the reader selects on (stable since the 2.x schemas that lack the enum tables),
and the labels of memory-copy kinds."""

from __future__ import annotations

import re

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
# Graph-level replays (`nsys --cuda-graph-trace=graph`): one row per graph launch, none of its kernels.
GRAPH_TRACE_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NVTX_TABLE = "NVTX_EVENTS"
GPU_TABLE = "TARGET_INFO_GPU"
CUDA_DEVICE_TABLE = "TARGET_INFO_CUDA_DEVICE"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # schema 3.x, schema 2.x


# NVTX event types (ENUM_NSYS_EVENT_TYPE), stable since the 2.x schemas that lack the enum table.
NVTX_RANGE_TYPES = {
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
}
NVTX_MARK_TYPES = {"NvtxMark": 34, "NvtxtMark": 65}
NVTX_DOMAIN_CREATE_TYPES = {"NvtxDomainCreate": 75}
NVTX_THREAD_TYPES = {"NvtxThread": 39}  # nvtxNameOsThread

# Runtime-table event classes (ENUM_NSYS_EVENT_CLASS) that repeat an API call to attach its backtrace;
# schema 2.x exports store such a second row under the call's correlation id.
BACKTRACE_CLASSES = {
    "TRACE_PROCESS_EVENT_CUDABACKTRACE": 67,
    "TRACE_PROCESS_EVENT_CUDABACKTRACE_START": 68,
    "TRACE_PROCESS_EVENT_CUDABACKTRACE_FINISH": 69,
}

# CUpti_ActivityMemcpyKind labels, as ENUM_CUDA_MEMCPY_OPER states them in exports that have it.
MEMCPY_KINDS = {
    0: "Unknown",
    1: "Host-to-Device",
    2: "Device-to-Host",
    3: "Host-to-Array",
    4: "Array-to-Host",
    5: "Array-to-Array",
    6: "Array-to-Device",
    7: "Device-to-Array",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
    11: "Unified Host-to-Device",
    12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}

# API names carry the CUDA version that introduced them ("cudaLaunchKernel_v7000"); dropped so that names
# agree with other formats. Real name parts such as "cuGetProcAddress_v2" (one or two digits) are kept.
API_VERSION_SUFFIX = re.compile(r"_v\d{4,}$")

# The name nsys's MPI trace gives a rank's thread (an NvtxThread event).
MPI_RANK = re.compile(r"^MPI Rank (\d+)$")

# The tables a salvage copies out of a damaged export.
SALVAGE_TABLES = (
    "StringIds",
    KERNEL_TABLE,
    RUNTIME_TABLE,
    MEMCPY_TABLE,
    MEMSET_TABLE,
    GRAPH_TRACE_TABLE,
    NVTX_TABLE,
    GPU_TABLE,
    CUDA_DEVICE_TABLE,
    *META_TABLES,
    "ENUM_NSYS_EVENT_TYPE",
    "ENUM_NSYS_EVENT_CLASS",
    "ENUM_CUDA_MEMCPY_OPER",
)
