-- The normalized schema every reader fills, whatever the input format.
--
-- Conventions: times are int64 nanoseconds on the trace's own clock (`*_ns`); sizes are bytes
-- (`*_bytes`); every table carries `trace_id` so that many traces can live in one database or one
-- Parquet dataset. A column a format cannot provide is NULL, never a made-up value.
-- docs/SCHEMA.md documents each column; tests/test_schema.py keeps the two in step.

-- One row per ingested trace file.
CREATE TABLE IF NOT EXISTS traces (
    trace_id        INTEGER NOT NULL,   -- key used by every other table
    path            VARCHAR NOT NULL,   -- the file as given by the user (absolute)
    format          VARCHAR NOT NULL,   -- 'kineto' | 'nsys-sqlite' | 'nsys-rep' | 'ncu-csv'
    format_version  VARCHAR,            -- Kineto schemaVersion, nsys export schema version, ...
    tool_version    VARCHAR,            -- profiler version when the file says (nsys 2025.3.1, cupti 130001, ...)
    source_path     VARCHAR,            -- the file actually read (the cached SQLite export of an .nsys-rep)
    size_bytes      BIGINT,             -- size of `path`
    start_ns        BIGINT,             -- first GPU activity in the trace
    end_ns          BIGINT,             -- last GPU activity in the trace
    warnings        VARCHAR[],          -- what the reader could not read, in words
    rank            INTEGER,            -- this file's rank in its distributed run (Kineto distributedInfo.rank; nsys: an 'MPI Rank N' NVTX range), else NULL
    world_size      INTEGER,            -- ranks in the run (Kineto distributedInfo.world_size), else NULL
    dist_backend    VARCHAR,            -- the run's communication backend as the trace names it ('nccl', 'gloo', 'mpi', ...), else NULL
    process_groups  VARCHAR             -- the run's process groups as JSON, as Kineto's distributedInfo.pg_config lists them ([{pg_name, pg_desc, backend_config, pg_size, ranks}]), else NULL
);

-- One row per GPU the trace describes.
CREATE TABLE IF NOT EXISTS devices (
    trace_id                INTEGER NOT NULL,
    device_id               INTEGER NOT NULL,   -- CUDA device ordinal as the trace numbers it
    name                    VARCHAR,            -- 'NVIDIA H200'
    num_sms                 INTEGER,            -- streaming multiprocessors
    compute_major           INTEGER,            -- compute capability, major (9 for Hopper)
    compute_minor           INTEGER,            -- compute capability, minor
    regs_per_sm             INTEGER,            -- 32-bit registers per SM
    regs_per_block          INTEGER,            -- 32-bit registers one block may use
    smem_per_sm_bytes       BIGINT,             -- shared memory per SM
    smem_per_block_optin_bytes BIGINT,          -- opt-in shared memory limit per block
    max_threads_per_sm      INTEGER,
    max_threads_per_block   INTEGER,
    max_blocks_per_sm       INTEGER,
    max_warps_per_sm        INTEGER,
    warp_size               INTEGER,
    total_mem_bytes         BIGINT,             -- device memory
    mem_bandwidth_bytes_per_s BIGINT,           -- peak DRAM bandwidth when the trace states it
    clock_hz                BIGINT,             -- SM clock when the trace states it
    l2_bytes                BIGINT
);

-- One row per distinct kernel name of the traces (with its mangled name): the names `kernels` gives its rows, held
-- once each rather than once per kernel (a templated FlashInfer name is ~400 characters and a trace runs a few
-- hundred distinct ones: a million kernels carried ~870 MB of names to insert and compress).
CREATE TABLE IF NOT EXISTS kernel_names (
    trace_id                INTEGER NOT NULL,
    name_id                 INTEGER NOT NULL,   -- 0.. across the database's traces, a trace's ids one after another
    name                    VARCHAR NOT NULL,   -- demangled name with template arguments (`kernels.name`)
    mangled_name            VARCHAR             -- when the trace has it (`kernels.mangled_name`)
);

-- The rows of `kernels` as stored: each kernel's names as a `kernel_names.name_id`.
CREATE TABLE IF NOT EXISTS kernel_rows (
    trace_id                INTEGER NOT NULL,
    kernel_id               BIGINT NOT NULL,    -- as `kernels.kernel_id`
    name_id                 INTEGER NOT NULL,   -- its names: `kernel_names.name_id`
    device_id               INTEGER,            -- as `kernels.device_id`
    stream_id               BIGINT,             -- as `kernels.stream_id`
    start_ns                BIGINT NOT NULL,    -- as `kernels.start_ns`
    end_ns                  BIGINT NOT NULL,    -- as `kernels.end_ns`
    dur_ns                  BIGINT NOT NULL,    -- as `kernels.dur_ns`
    grid_x                  INTEGER,            -- as `kernels.grid_x`
    grid_y                  INTEGER,            -- as `kernels.grid_y`
    grid_z                  INTEGER,            -- as `kernels.grid_z`
    block_x                 INTEGER,            -- as `kernels.block_x`
    block_y                 INTEGER,            -- as `kernels.block_y`
    block_z                 INTEGER,            -- as `kernels.block_z`
    registers_per_thread    INTEGER,            -- as `kernels.registers_per_thread`
    static_smem_bytes       INTEGER,            -- as `kernels.static_smem_bytes`
    dynamic_smem_bytes      INTEGER,            -- as `kernels.dynamic_smem_bytes`
    smem_bytes              INTEGER,            -- as `kernels.smem_bytes`
    correlation_id          BIGINT,             -- as `kernels.correlation_id`
    process_id              BIGINT,             -- as `kernels.process_id`
    graph_node_id           BIGINT,             -- as `kernels.graph_node_id`
    graph_id                BIGINT              -- as `kernels.graph_id`
);

-- One row per GPU kernel execution: a view of `kernel_rows`, each row with its names from `kernel_names` (looked up
-- by position, so that its rows come in `kernel_rows`' order, kernel_id order within a trace).
CREATE VIEW IF NOT EXISTS kernels (
    trace_id,               -- INTEGER NOT NULL
    kernel_id,              -- BIGINT NOT NULL: 0.. in start order within the trace
    name,                   -- VARCHAR NOT NULL: demangled name with template arguments
    mangled_name,           -- VARCHAR: when the trace has it
    device_id,              -- INTEGER: GPU that ran it
    stream_id,              -- BIGINT: CUDA stream
    start_ns,               -- BIGINT NOT NULL: kernel start on the GPU
    end_ns,                 -- BIGINT NOT NULL: kernel end on the GPU
    dur_ns,                 -- BIGINT NOT NULL: end_ns - start_ns
    grid_x,                 -- INTEGER: grid size in CTAs along x
    grid_y,                 -- INTEGER: grid size along y
    grid_z,                 -- INTEGER: grid size along z
    block_x,                -- INTEGER: threads per block along x
    block_y,                -- INTEGER: threads per block along y
    block_z,                -- INTEGER: threads per block along z
    registers_per_thread,   -- INTEGER: registers allocated per thread
    static_smem_bytes,      -- INTEGER: NULL where the format only gives the total
    dynamic_smem_bytes,     -- INTEGER: NULL where the format only gives the total
    smem_bytes,             -- INTEGER: static + dynamic shared memory per block
    correlation_id,         -- BIGINT: links to `launches.correlation_id` (unique per process)
    process_id,             -- BIGINT: OS process that launched it, when the trace says
    graph_node_id,          -- BIGINT: CUDA graph node when launched from a graph (nsys --cuda-graph-trace=node)
    graph_id                -- BIGINT: CUDA graph it was replayed from, when the trace says (nsys exports with the kernel's graphId); `graph_replays` links kernels to replays in every format
) AS SELECT
    k.trace_id,
    k.kernel_id,
    (SELECT list(name ORDER BY name_id) FROM kernel_names)[k.name_id + 1] AS name,
    (SELECT list(mangled_name ORDER BY name_id) FROM kernel_names)[k.name_id + 1] AS mangled_name,
    k.device_id,
    k.stream_id,
    k.start_ns,
    k.end_ns,
    k.dur_ns,
    k.grid_x,
    k.grid_y,
    k.grid_z,
    k.block_x,
    k.block_y,
    k.block_z,
    k.registers_per_thread,
    k.static_smem_bytes,
    k.dynamic_smem_bytes,
    k.smem_bytes,
    k.correlation_id,
    k.process_id,
    k.graph_node_id,
    k.graph_id
FROM kernel_rows k;

-- Host-side runtime/driver API calls that launched GPU work (matched by correlation id).
CREATE TABLE IF NOT EXISTS launches (
    trace_id        INTEGER NOT NULL,
    correlation_id  BIGINT  NOT NULL,
    name            VARCHAR NOT NULL,   -- 'cudaLaunchKernel', 'cuLaunchKernelEx', 'cudaGraphLaunch', ...
    start_ns        BIGINT  NOT NULL,
    end_ns          BIGINT  NOT NULL,
    process_id      BIGINT,
    thread_id       BIGINT
);

-- One row per CUDA / HIP graph launch (a replay) seen in the trace: the host call (cudaGraphLaunch, cuGraphLaunch,
-- hipGraphLaunch, ...) and the GPU work it replayed. A replay's kernels carry its correlation id (Kineto, and nsys
-- --cuda-graph-trace=node); with --cuda-graph-trace=graph nsys records the replay as one graph-level activity and
-- none of its kernels (hidden). queries/kernel_graph_replay.sql gives each kernel its replay.
CREATE TABLE IF NOT EXISTS graph_replays (
    trace_id        INTEGER NOT NULL,
    replay_id       BIGINT  NOT NULL,   -- 0.. in launch order within the trace (host start; GPU start where the call is missing)
    correlation_id  BIGINT,             -- the launch's correlation id: `launches.correlation_id`, and that of the kernels it replayed
    name            VARCHAR,            -- the host call ('cudaGraphLaunch', 'cuGraphLaunch', 'hipGraphLaunch', ...); NULL when the trace lacks it
    graph_id        BIGINT,             -- the graph launched (CUPTI graphId) when the trace says, else NULL
    graph_exec_id   BIGINT,             -- its instantiated executable (CUPTI graphExecId) when the trace says, else NULL
    start_ns        BIGINT,             -- the host call's start; NULL when the trace lacks the call
    end_ns          BIGINT,             -- the host call's end
    process_id      BIGINT,             -- OS process of the host call
    thread_id       BIGINT,             -- OS thread of the host call
    device_id       INTEGER,            -- GPU that ran the replay (NULL when its work ran on several)
    stream_id       BIGINT,             -- stream it was launched on (graph-level record), else the one its work ran on when it is one
    gpu_start_ns    BIGINT,             -- start of its GPU work (graph-level record, else its first kernel or memory operation); NULL when not recorded
    gpu_end_ns      BIGINT,             -- end of its GPU work
    kernel_count    INTEGER NOT NULL,   -- its kernels in `kernels` (0 when hidden)
    hidden          BOOLEAN NOT NULL    -- recorded as one graph-level activity with none of its kernels (nsys --cuda-graph-trace=graph): recapture with --cuda-graph-trace=node to see them
);

-- Named time ranges: CPU annotations (record_function, ProfilerStep#N, NVTX push/pop and start/end)
-- and their GPU-side projections (Kineto's gpu_user_annotation).
CREATE TABLE IF NOT EXISTS ranges (
    trace_id        INTEGER NOT NULL,
    range_id        BIGINT  NOT NULL,   -- 0.. within the trace
    name            VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL,   -- 'annotation' | 'profiler_step' | 'nvtx' | 'gpu_annotation'
    side            VARCHAR NOT NULL,   -- 'cpu' (times on the launching thread) | 'gpu' (times of the GPU work)
    start_ns        BIGINT  NOT NULL,
    end_ns          BIGINT  NOT NULL,
    dur_ns          BIGINT  NOT NULL,
    process_id      BIGINT,
    thread_id       BIGINT,             -- CPU ranges: the thread that opened it
    device_id       INTEGER,            -- GPU ranges
    stream_id       BIGINT,             -- GPU ranges
    domain          VARCHAR             -- NVTX domain when not the default one
);

-- Host operations besides the ranges: torch.profiler's CPU ops and Python functions (Kineto `cpu_op`,
-- `python_function`), read at ingest so that no stage reads the trace file again. queries/host_ops.sql gives them
-- with the CPU ranges for the windows a diagnostic asks about.
CREATE TABLE IF NOT EXISTS host_ops (
    trace_id        INTEGER NOT NULL,
    op_id           BIGINT  NOT NULL,   -- 0.. in the order of the file
    name            VARCHAR NOT NULL,   -- 'aten::mm', 'cudaStreamSynchronize', a Python function's 'file.py(12): f'
    category        VARCHAR NOT NULL,   -- the event's category as written ('cpu_op' | 'python_function')
    start_ns        BIGINT  NOT NULL,
    end_ns          BIGINT  NOT NULL,
    dur_ns          BIGINT  NOT NULL,
    process_id      BIGINT,
    thread_id       BIGINT              -- the thread that ran it
);

-- What torch.distributed recorded on each collective kernel (Kineto: the args of its record_param_comms op copied
-- onto the NCCL kernel event, PyTorch 2.1 and later); model/ranks.py matches a run's ranks collective by collective.
CREATE TABLE IF NOT EXISTS collectives (
    trace_id        INTEGER NOT NULL,
    correlation_id  BIGINT  NOT NULL,   -- the kernel's `kernels.correlation_id`
    name            VARCHAR,            -- 'Collective name': 'allreduce', 'allgather_into_tensor_coalesced', 'send', ...
    in_nelems       BIGINT,             -- 'In msg nelems': elements in
    out_nelems      BIGINT,             -- 'Out msg nelems': elements out
    group_size      INTEGER,            -- 'Group size': ranks in the process group
    dtype           VARCHAR,            -- 'dtype' as written ('Float', 'BFloat16', ...)
    group_name      VARCHAR,            -- 'Process Group Name' ('0', or a hash-like id)
    group_desc      VARCHAR,            -- 'Process Group Description' ('default_pg', 'undefined', ...)
    group_ranks     VARCHAR,            -- 'Process Group Ranks' as written ('[0, 1]')
    seq             BIGINT              -- 'Seq': the collective's sequence number in its group, when the profiler wrote it
);

-- Memory copies and sets on the GPU (they matter for idle gaps between steps).
CREATE TABLE IF NOT EXISTS memops (
    trace_id        INTEGER NOT NULL,
    kind            VARCHAR NOT NULL,   -- 'memcpy' | 'memset'
    name            VARCHAR,            -- 'Memcpy HtoD (Pageable -> Device)', ...
    device_id       INTEGER,
    stream_id       BIGINT,
    start_ns        BIGINT  NOT NULL,
    end_ns          BIGINT  NOT NULL,
    dur_ns          BIGINT  NOT NULL,
    bytes           BIGINT,
    correlation_id  BIGINT
);

-- Nsight Compute: one row per profiled kernel.
CREATE TABLE IF NOT EXISTS ncu_kernels (
    trace_id        INTEGER NOT NULL,
    ncu_id          INTEGER NOT NULL,   -- the CSV's "ID" column
    name            VARCHAR NOT NULL,   -- as ncu prints it (demangled)
    device_id       INTEGER,
    stream_id       BIGINT,
    grid_x          INTEGER,
    grid_y          INTEGER,
    grid_z          INTEGER,
    block_x         INTEGER,
    block_y         INTEGER,
    block_z         INTEGER,
    nvtx            VARCHAR,            -- innermost NVTX range text that enclosed the launch, when captured
    kernel_id       BIGINT              -- the matched `kernels.kernel_id` of a trace given alongside, else NULL
);

-- Nsight Compute: one row per (kernel, metric).
CREATE TABLE IF NOT EXISTS ncu_metrics (
    trace_id        INTEGER NOT NULL,
    ncu_id          INTEGER NOT NULL,
    metric          VARCHAR NOT NULL,   -- 'sm__cycles_active.avg', ...
    unit            VARCHAR,            -- as ncu states it ('cycle', 'byte', '%', ...)
    value           DOUBLE,             -- numeric value; NULL when the cell is not a number
    text            VARCHAR             -- the raw cell
);

-- Batch composition per step from a sidecar (collector output or the *.meta.json files) or a FlashInfer API log.
CREATE TABLE IF NOT EXISTS batches (
    trace_id        INTEGER NOT NULL,
    step_key        VARCHAR NOT NULL,   -- what the sidecar calls the step; matched against range names
    batch_size      INTEGER,
    kv_lens         BIGINT[],           -- every request's KV length in tokens
    qo_heads        INTEGER,
    kv_heads        INTEGER,
    head_dim        INTEGER,
    page_size       INTEGER,
    kv_dtype        VARCHAR,
    path            VARCHAR,            -- 'cuda-core' | 'tensor-core' | ...
    backend         VARCHAR,            -- backend id as the labels use it ('flashinfer-cuda-core', 'flashinfer-fa2', ...)
    cuda_graph      BOOLEAN,
    planned_padded_batch INTEGER,       -- the planner's own decision when recorded
    planned_split_kv BOOLEAN,
    planned_chunk_tokens INTEGER,
    plan_info       BIGINT[],           -- FlashInfer's raw plan_info when recorded
    qo_lens         BIGINT[],           -- query rows per request (1 = decode; > 1 = prefill/extend), when recorded
    planned_num_splits INTEGER,         -- FA3: the static split bound S the call planned with
    planned_splits  BIGINT[],           -- FA3: splits per request as the scheduler metadata says (1 = not cut)
    call_num_splits INTEGER,            -- the call's num_splits argument (0 = the backend's heuristic)
    call_pack_gqa   BOOLEAN,            -- the call's pack_gqa argument (NULL: the backend decided)
    call_sm_margin  INTEGER,            -- SMs the call left out of the persistent grid
    call_causal     BOOLEAN,            -- causal masking
    call_scheduler_metadata BOOLEAN,    -- precomputed scheduler metadata was passed
    call_max_seqlen_k BIGINT,           -- the max_seqlen_k argument (tokens; FA3's static split heuristic reads it)
    log_call        INTEGER,            -- FlashInfer API log: this plan() call's position among the log's plan() calls (0-based)
    log_runs        BIGINT[]            -- FlashInfer API log: positions (0-based) of the run() calls this plan served, among the log's run() calls
);

-- ---------------------------------------------------------------------------------------------------------------
-- The analysis as tables: filled by `traceinsight.report.tables.write_tables` after a trace is analyzed (`sql`
-- over these names, `export --parquet --analysis`); empty in a database that was only ingested.

-- One row per decode step.
CREATE TABLE IF NOT EXISTS steps (
    trace_id        INTEGER NOT NULL,
    step            INTEGER NOT NULL,   -- the step's index (findings name steps by it), 0.. in time order
    name            VARCHAR NOT NULL,   -- the range name, or '<kernel> launch <i>'
    source          VARCHAR NOT NULL,   -- 'range:<kind>' | 'launch'
    range_id        BIGINT,             -- `ranges.range_id` of the step's range
    phase           VARCHAR NOT NULL,   -- 'decode' | 'prefill' | 'mixed' | 'unknown'
    split_kv        BOOLEAN,            -- every attention launch agrees on split-KV on/off; NULL if mixed/unknown
    start_ns        BIGINT NOT NULL,    -- first kernel start of the step
    dur_ns          BIGINT NOT NULL,    -- GPU span of the step's kernels
    attention_ns    BIGINT NOT NULL,    -- attention launches with their merge/prepare kernels
    kernel_count    INTEGER NOT NULL,   -- kernels in the step
    wall_ns         BIGINT NOT NULL,    -- what the step took as the engine waits for it (its window)
    window_start_ns BIGINT,             -- the window (docs/DIAGNOSTICS.md, latency-spike)
    window_end_ns   BIGINT,             -- end of the window
    window_source   VARCHAR,            -- 'cpu-range' | 'gpu-range' | 'gpu-span'
    host_gap_max_ns BIGINT,             -- the longest stretch the GPU waited for the host
    host_long_ns    BIGINT,             -- idle-host time in stretches of at least 100 us
    host_range_ns   BIGINT,             -- the step's range on the host; NULL without one
    idle_stretches  INTEGER,            -- separate idle stretches in the window
    host_gaps       BIGINT[][],         -- the 3 longest idle-host stretches of at least 100 us, [start, end] ns
    batch_json      VARCHAR             -- the step's batch as the model read it (docs/JSON.md `batch`), as JSON
);

-- One row per step and component of its breakdown: the components of a step add up to its wall_ns.
CREATE TABLE IF NOT EXISTS step_breakdown (
    trace_id        INTEGER NOT NULL,
    step            INTEGER NOT NULL,   -- `steps.step`
    component       VARCHAR NOT NULL,   -- 'attention' | 'prefill' | a kernel family | 'idle-host' | 'idle-wait' | 'idle-unknown'
    ns              BIGINT NOT NULL     -- time of the component in the step's window
);

-- One row per attention launch of a step, with the merge/combine and prepare kernels attached to it.
CREATE TABLE IF NOT EXISTS attention_launches (
    trace_id        INTEGER NOT NULL,
    step            INTEGER NOT NULL,   -- `steps.step`
    kernel_id       BIGINT NOT NULL,    -- `kernels.kernel_id` of the attention kernel
    kernel          VARCHAR NOT NULL,   -- short name
    backend         VARCHAR,            -- backend id of the label ('flashinfer-fa2', 'fa3', ...)
    phase           VARCHAR NOT NULL,   -- 'decode' | 'prefill' | 'mixed' | 'unknown' in context
    phase_evidence  VARCHAR,            -- why that phase
    split_kv        BOOLEAN,            -- NULL: not visible for this backend
    split_evidence  VARCHAR,            -- why that split state
    start_ns        BIGINT NOT NULL,    -- the attention kernel's start
    dur_ns          BIGINT NOT NULL,    -- the attention kernel alone
    merge_kernel_ids BIGINT[],          -- merge/combine kernels attached to the launch
    merge_ns        BIGINT NOT NULL,    -- their time
    prepare_kernel_ids BIGINT[],        -- prepare kernels attached to the launch
    prepare_ns      BIGINT NOT NULL,    -- their time
    tile_padding_share DOUBLE,          -- padded share of the query tiles (sidecar qo_lens, tensor-core kernels)
    launch          INTEGER,            -- 0.. the launch's place in its step (the JSON document's order)
    name            VARCHAR,            -- the attention kernel's full name
    family          VARCHAR,            -- its label's family
    params_json     VARCHAR,            -- its label's template parameters, as JSON
    grid            INTEGER[],          -- (x, y, z)
    block           INTEGER[],          -- (x, y, z)
    registers_per_thread INTEGER,       -- registers per thread of the attention kernel
    smem_bytes      BIGINT,             -- shared memory per CTA (static + dynamic)
    stream          BIGINT,             -- the stream it ran on
    merges_json     VARCHAR,            -- the merge/combine kernels: [{kernel, grid, dur_ns}], as JSON
    prepares_json   VARCHAR,            -- the prepare kernels: [{kernel, grid, dur_ns}], as JSON
    tiles_json      VARCHAR,            -- query-tile padding facts (docs/JSON.md `tiles`), as JSON
    ncu_id          BIGINT,             -- the Nsight Compute result matched to the launch
    sm_active_min   DOUBLE,             -- its sm__cycles_active: least busy SM
    sm_active_avg   DOUBLE,             -- mean over SMs
    sm_active_max   DOUBLE              -- busiest SM
);

-- One row per attention launch the schedule model describes.
CREATE TABLE IF NOT EXISTS launch_models (
    trace_id        INTEGER NOT NULL,
    kernel_id       BIGINT NOT NULL,    -- the launch (`attention_launches.kernel_id`)
    source          VARCHAR NOT NULL,   -- 'sidecar' (planned from the batch) | 'trace' (what the grid says)
    work_items      INTEGER,            -- CTAs (or persistent tiles) that do work
    chunk_tokens    INTEGER,            -- KV chunk length (tokens); NULL when not split or varying
    split_kv        BOOLEAN,            -- the planner's split decision
    predicted_ns    BIGINT,             -- simulated kernel time
    sm_idle         DOUBLE,             -- simulated 1 - mean/max SM busy time
    tail_ns         BIGINT,             -- simulated time with fewer than half the SMs busy
    balanced_ns     BIGINT,             -- the same work at full-GPU throughput
    grid_matches    BOOLEAN,            -- the planned grid equals the traced one
    longest_item_tokens BIGINT,         -- the longest work item (KV tokens)
    measured_sm_idle DOUBLE,            -- Nsight Compute's 1 - avg/max sm__cycles_active, when matched
    note            VARCHAR             -- what could not be modelled
);

-- One row per finding.
CREATE TABLE IF NOT EXISTS findings (
    trace_id        INTEGER NOT NULL,
    finding         INTEGER NOT NULL,   -- 0.. in report order (most severe, then largest saving, first)
    rule_id         VARCHAR NOT NULL,   -- 'split-kv-off', 'latency-spike', ...
    severity        VARCHAR NOT NULL,   -- 'critical' | 'warning' | 'info'
    steps           INTEGER[],          -- the steps it concerns
    summary         VARCHAR NOT NULL,   -- one line
    cause           VARCHAR,            -- latency-spike: the cause id; else NULL
    saving_ns       BIGINT,             -- estimated saving; NULL when it cannot be computed
    evidence_json   VARCHAR,            -- the numbers behind it (docs/JSON.md), as JSON
    remedy          VARCHAR,            -- what to change
    explanation     VARCHAR,            -- one paragraph
    ref             VARCHAR,            -- the finding's reference ('F1', ...), which `supports` and `related` use
    supports        VARCHAR,            -- the ref of the root cause this finding is evidence for; NULL: a root cause
    related         VARCHAR[],          -- a root cause: the refs of the findings that support it
    attributed_saving_ns BIGINT,        -- a root cause: its saving, bounded step by step by the step's time minus its floor
    saving_basis    VARCHAR             -- what attributed_saving_ns is bounded by: 'steps' | 'span' (between steps)
);

-- One row per rule run on the trace.
CREATE TABLE IF NOT EXISTS rule_checks (
    trace_id        INTEGER NOT NULL,
    rule_id         VARCHAR NOT NULL,   -- the rule's id
    name            VARCHAR NOT NULL,   -- the rule's human name
    status          VARCHAR NOT NULL,   -- 'fired' | 'passed' | 'not-applicable'
    reason          VARCHAR,            -- why not applicable, or what passing means and what was examined
    findings        INTEGER NOT NULL    -- findings it made
);

-- One row per analyzed trace: the report's trace-level sections (a fixed size whatever the trace's length), so that
-- a report is rendered from the tables alone (`traceinsight report`). JSON as in the document (docs/JSON.md).
CREATE TABLE IF NOT EXISTS analyses (
    trace_id        INTEGER NOT NULL,
    analyzer        VARCHAR NOT NULL,   -- the traceinsight version that analyzed it
    path            VARCHAR NOT NULL,   -- the trace file
    format          VARCHAR,            -- 'kineto' | 'nsys-sqlite' | ...
    format_version  VARCHAR,            -- the trace format's version
    tool_version    VARCHAR,            -- the profiler's version
    gpu_json        VARCHAR,            -- {name, num_sms, device_id, compute_capability}
    start_ns        BIGINT,             -- the trace's first event
    end_ns          BIGINT,             -- its last event's end
    dur_ns          BIGINT,             -- end_ns - start_ns
    warnings        VARCHAR[],          -- what the reader warned about
    families_json   VARCHAR,            -- GPU time per kernel family
    kernels_json    VARCHAR,            -- the labelled kernel table
    thresholds_json VARCHAR,            -- the split-KV thresholds the model derived
    summary_json    VARCHAR,            -- the trace's summary row (as `fleet` shows it)
    step_summary_json VARCHAR,          -- what every step adds up to
    savings_json    VARCHAR,            -- what the listed savings are bounded by and add up to
    model_json      VARCHAR,            -- the schedule model as a whole: GPU, cost models, idle gaps, notes
    extra_json      VARCHAR,            -- further top-level keys of the document
    gantt_json      VARCHAR,            -- the report's Gantt (the worst simulated launch's CTAs on SMs), or why none
    sweep_json      VARCHAR             -- the batch-size sweep's panels (NULL: saved before they were kept)
);
