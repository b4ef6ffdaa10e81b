#!/usr/bin/env bash
# Run a whole collection on a GPU machine without internet, in one go.
#
#   collectors/run_on_device.sh smoke|full|check|loop [full]|fa3 [full]|captures [smoke|full]
#
# loop: the decode-loop captures of ../examples/loop (tiny loops of every mode first, into /tmp/smoke, packed as
# smoke.tgz; then the five full runs into collected.tgz), each summarized by examples/loop/step_times.py;
# `loop full` makes the full runs only.
#
# fa3: FlashAttention-3 varlen decode (--backend fa3) for ../examples/fa3: the wheel's smoke test
# (python -m collectors.fa3_decode), tiny runs of every kind and profiler (into /tmp/smoke, packed as smoke.tgz),
# then the captures (collected.tgz); `fa3 full` skips the smoke test and tiny runs; ONLY=NAME,NAME runs only
# those jobs. It needs only .whl_fa3/
# (fa3-fwd 0.0.3 + nvtx wheels) and .debs/, no FlashInfer and no JIT cache.
#
# captures fa3: FlashAttention-3's A/A + A/B runs of collectors/abtest.py (needs .whl_fa3/ only).
# captures: the captures of issues 27 and 29 (../examples/sdpa, ../examples/mixed, ../examples/gemm_burst,
# ../examples/abtest): PyTorch SDPA decode through every backend (python -m collectors.sdpa), chunked-prefill
# mixed steps through FlashInfer's FA2 and SM90 prefill kernels, a decode loop with a 1.6x GEMM burst, and the
# A/A + A/B captures of python -m collectors.abtest; `captures smoke` runs each at a tiny size.
#
# Run from the repository root. Expects (carried beside the checkout, git-ignored):
#   .whl/    flashinfer-python 0.6.1, apache-tvm-ffi 0.1.9, nvtx, einops, tabulate,
#            ninja, nvidia-ml-py wheels (cp312 / py3, manylinux x86_64) — see collectors/README.md
#   .debs/   Debian libdw1 + libelf1 (+ libbz2, liblzma): QdstrmImporter needs libdw.so.1
#   .jitcache/jit_so.tgz (optional) FlashInfer kernels compiled by an earlier run, used as its AOT folder
# Writes into $OUT (default /tmp/collect-out): device.log, summary.txt, collected.tgz (the traces and
# sidecars) and jit_so.tgz (the compiled FlashInfer modules, to carry into the next run).
# Each job is limited in time, and jobs that would start after $DEADLINE seconds are skipped, so the
# packing at the end always happens.
set -u
START=$(date +%s)
OUT=${OUT:-/tmp/collect-out}
DEADLINE=${DEADLINE:-520}   # no job starts after this many seconds
HARD=${HARD:-570}           # and none runs past this one (the device tool stops a command at 600 s)
C=$OUT/collected
mkdir -p "$C"
exec > >(tee -a "$OUT/device.log") 2>&1

elapsed() { echo $(( $(date +%s) - START )); }

setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
  export FLASHINFER_WORKSPACE_BASE=/tmp/fiws
  if [ -f .jitcache/jit_so.tgz ]; then  # precompiled modules: FlashInfer loads data/aot/NAME/NAME.so as is
    mkdir -p /tmp/site/flashinfer/data/aot && tar xzf .jitcache/jit_so.tgz -C /tmp/site/flashinfer/data/aot
    echo "AOT modules: $(ls /tmp/site/flashinfer/data/aot | tr '\n' ' ')"
  fi
  mkdir -p /tmp/dwlibs
  for f in .debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" /tmp/dwlibs; done
  export TRACEINSIGHT_EXTRA_LD_LIBRARY_PATH=/tmp/dwlibs/usr/lib/x86_64-linux-gnu:/tmp/dwlibs/lib/x86_64-linux-gnu
  echo "nvcc: $(command -v nvcc) $(nvcc --version 2>/dev/null | tail -1)"; ls -d /usr/local/cuda* 2>/dev/null
  echo "ncu: $(command -v ncu)  nsys: $(command -v nsys)"; ls /opt/nvidia/nsight-compute/*/host/ 2>/dev/null
  local q; q=$(ls /opt/nvidia/nsight-compute/*/host/*/QdstrmImporter 2>/dev/null | head -1)
  [ -n "$q" ] && LD_LIBRARY_PATH=$TRACEINSIGHT_EXTRA_LD_LIBRARY_PATH ldd "$q" | grep -i "not found"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import torch, flashinfer, nvtx; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'flashinfer', flashinfer.__version__, torch.cuda.get_device_name())"
  echo "setup done at $(elapsed)s"
}

# warm NAME ARGS...: compile FlashInfer's modules for a path/dtype with a tiny timing run (in the background)
warm() {
  local name=$1; shift
  python3 -m collectors timing --out /tmp/warm --name "warm_$name" --batch-sizes 8 --dists uniform \
    --steps 1 --warmup 0 --total-tokens 8192 "$@" >"/tmp/warm_$name.log" 2>&1
  echo "warm $name rc=$? at $(elapsed)s" | tee -a "$OUT/summary.txt"
  tail -3 "/tmp/warm_$name.log"
}

# await PID...: wait for background warm-ups, but not past the deadline
await() {
  for p in "$@"; do
    while kill -0 "$p" 2>/dev/null; do
      if (( $(elapsed) > DEADLINE )); then echo "gave up waiting for $p at $(elapsed)s"; kill "$p"; break; fi
      sleep 2
    done
  done
}

# job NAME TIMEOUT ARGS...: one collection into $C
job() {
  local name=$1 tmo=$2; shift 2
  if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; then return; fi  # ONLY=job,job: just these
  if (( $(elapsed) > DEADLINE )); then echo "$name skipped at $(elapsed)s" | tee -a "$OUT/summary.txt"; return; fi
  local left=$(( HARD - $(elapsed) ))
  (( tmo > left )) && tmo=$left
  local t0; t0=$(date +%s)
  echo "=== $name: $*"
  timeout "$tmo" python3 -m collectors "$@" --out "$C"
  echo "$name rc=$? $(( $(date +%s) - t0 ))s (at $(elapsed)s)" | tee -a "$OUT/summary.txt"
}

pack() {
  ls -la "$C"
  tar czf "$OUT/collected.tgz" -C "$OUT" collected && rm -rf "$C"
  if (( $(stat -c %s "$OUT/collected.tgz") > 15 * 1024 * 1024 )); then  # the device tool brings back <= 16 MiB a file
    split -b 15m "$OUT/collected.tgz" "$OUT/collected.tgz.part-" && rm "$OUT/collected.tgz"
  fi
  local ops
  ops=$(ls -d "${FLASHINFER_WORKSPACE_BASE:-/nonexistent}"/.cache/flashinfer/*/*/cached_ops 2>/dev/null | head -1)
  if [ -n "$ops" ]; then
    (cd "$ops" && ls -la ./*/*.so && tar czf "$OUT/jit_so.tgz" ./*/*.so)
  fi
  ls -la "$OUT"
  echo "total $(elapsed)s"
}

A=(--qo-heads 32 --kv-heads 4 --head-dim 128)   # Qwen3-30B-A3B-like, as ../shared/traces/h200
B=(--qo-heads 64 --kv-heads 8 --head-dim 128)   # Llama-3-70B-like: CUDA-core split-KV off from B=149, FA2 from 33
BS_A=8,16,32,64,96,128,192,256,296,297,320,384,512
BS_B=8,16,32,33,48,64,96,128,144,148,149,160,192,256,384
SERVE=(--max-batch 192 --initial 128 --arrival-rate 1.0 --prompt-len 512:4096 --output-len 64:512
       --long-every 100 --long-len 131072)

setup_fa3() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl_fa3/*.whl || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
  mkdir -p /tmp/dwlibs
  for f in .debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" /tmp/dwlibs; done
  export TRACEINSIGHT_EXTRA_LD_LIBRARY_PATH=/tmp/dwlibs/usr/lib/x86_64-linux-gnu:/tmp/dwlibs/lib/x86_64-linux-gnu
  echo "ncu: $(command -v ncu) $(ncu --version 2>/dev/null | tail -1)"
  ls /opt/nvidia/nsight-compute/*/host/*/nsys 2>/dev/null && \
    "$(ls /opt/nvidia/nsight-compute/*/host/*/nsys | head -1)" --version
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import torch, fa3_fwd_interface, nvtx; from importlib.metadata import version; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'fa3_fwd', version('fa3_fwd'), 'nvtx', version('nvtx'), \
torch.cuda.get_device_name())"
  echo "setup done at $(elapsed)s"
}

# FA3 (shape A and B, G = 8): batch sizes across the dynamic-split cap of 992 requests
BS_FA3=64,256,512,896,960,992,993,1024,1280,1536
SERVE_FA3=(--max-batch 1100 --initial 950 --arrival-rate 2.0 --prompt-len 128:1024 --output-len 64:512
           --long-every 970 --long-len 131072)
VARIANTS=(--num-splits 0,1,4,16 --scheduler-metadata both --causal both --sm-margin 0,8)

fa3() {  # fa3 [full]
  local full=$C fails=0 rc
  if [ "${1:-}" != full ]; then
    timeout 120 python3 -m collectors.fa3_decode; rc=$?
    echo "fa3 smoke rc=$rc at $(elapsed)s" | tee -a "$OUT/summary.txt"; (( rc )) && fails=1
    C=/tmp/smoke
    mkdir -p "$C"
    job t_sweep 60 sweep "${A[@]}" --backend fa3 --dists uniform,skew80 --batch-sizes 64,993 --steps 1 \
      --num-splits 0,4 --scheduler-metadata both --name t_sweep
    job t_serving 60 serving "${B[@]}" --backend fa3 --steps 12 "${SERVE_FA3[@]}" --name t_serving
    job t_timing 60 timing "${B[@]}" --backend fa3 --dists skew80 --batch-sizes 992,993 --steps 5 --warmup 1 \
      --name t_timing
    job t_nsys 90 sweep "${A[@]}" --backend fa3 --dists skew80 --batch-sizes 992,993 --steps 1 --profiler nsys \
      --name t_nsys
    job t_ncu 90 sweep "${A[@]}" --backend fa3 --dists skew80 --batch-sizes 993 --steps 1 --profiler ncu \
      --name t_ncu
    [ -f "$C/t_ncu.ncu.csv" ] && python3 -c "import csv,sys; l=open(sys.argv[1]).read().splitlines(); \
r=list(csv.reader(l[next(i for i, x in enumerate(l) if x.startswith('\"ID\"')):])); i=r[0].index('Kernel Name'); \
[print('ncu kernel:', x[i][:300]) for x in r[2:]]" "$C/t_ncu.ncu.csv"
    grep -h " rc=" "$OUT/summary.txt" | grep "^t_" | grep -vq " rc=0 " && fails=1
    tar czf "$OUT/smoke.tgz" -C /tmp smoke
    C=$full
    if (( fails )); then echo "smoke failed: no captures"; return; fi
  fi
  job sweep_A 90 sweep "${A[@]}" --backend fa3 --dists uniform,skew40,skew80 --batch-sizes $BS_FA3 --steps 2
  job sweep_B 90 sweep "${B[@]}" --backend fa3 --dists uniform,skew40,skew80 --batch-sizes $BS_FA3 --steps 2
  job timing_A 90 timing "${A[@]}" --backend fa3 --dists uniform,skew40,skew80 --batch-sizes $BS_FA3 --steps 20 \
    --warmup 3
  job timing_B 90 timing "${B[@]}" --backend fa3 --dists uniform,skew40,skew80 --batch-sizes $BS_FA3 --steps 20 \
    --warmup 3
  job variants_A 90 sweep "${A[@]}" --backend fa3 --dists skew80 --batch-sizes 256,1024 --steps 2 "${VARIANTS[@]}" \
    --name variants_q32kv4d128_fa3_torch
  job variants_B 90 sweep "${B[@]}" --backend fa3 --dists skew80 --batch-sizes 256,1024 --steps 2 "${VARIANTS[@]}" \
    --name variants_q64kv8d128_fa3_torch
  job timing_variants_A 90 timing "${A[@]}" --backend fa3 --dists uniform,skew80 --batch-sizes 256,1024 --steps 20 \
    --warmup 3 --num-splits 0,1,4,16 --scheduler-metadata both --sm-margin 0,8 --name timing_variants_q32kv4d128_fa3_none
  job serving_B 120 serving "${B[@]}" --backend fa3 --steps 200 "${SERVE_FA3[@]}" --scheduler-metadata both \
    --gzip-sidecar
  job nsys_A 150 sweep "${A[@]}" --backend fa3 --dists uniform,skew80 --batch-sizes 896,960,992,993,1024 --steps 2 \
    --profiler nsys
  job ncu_A 200 sweep "${A[@]}" --backend fa3 --dists uniform,skew80 --batch-sizes 256,992,993,1024 --steps 1 \
    --num-splits 0,1 --profiler ncu
  job ncu_B 200 sweep "${B[@]}" --backend fa3 --dists uniform,skew40,skew80 --batch-sizes 960,992,993,1024 --steps 1 \
    --profiler ncu
  job ncu_variants_A 200 sweep "${A[@]}" --backend fa3 --dists skew40,skew80 --batch-sizes 256,1024 --steps 1 \
    --num-splits 4,16 --scheduler-metadata both --profiler ncu --name ncu_variants_q32kv4d128_fa3_ncu
}

smoke() {
  warm core --paths cuda-core & W1=$!
  warm fa2 --paths tc-fa2 & W2=$!
  warm auto --paths tc-auto & W3=$!
  warm fp8 --paths cuda-core,tc-fa2 --kv-dtype fp8_e4m3 & W4=$!
  await $W1 $W2
  job s_sweep_torch 120 sweep "${A[@]}" --paths cuda-core,tc-fa2 --dists uniform,skew80 --batch-sizes 64,296,320 \
    --steps 2 --name s_sweep
  job s_sweep_graph 120 sweep "${A[@]}" --paths cuda-core,tc-fa2 --dists skew80 --batch-sizes 64,320 --steps 2 \
    --cuda-graph --name s_sweep_graph
  job s_serving 120 serving "${B[@]}" --paths cuda-core --steps 40 "${SERVE[@]}" --name s_serving
  job s_serving_graph 120 serving "${B[@]}" --paths cuda-core,tc-fa2 --steps 40 "${SERVE[@]}" --cuda-graph \
    --name s_serving_graph
  job s_nsys 180 sweep "${A[@]}" --paths cuda-core --dists uniform,skew80 --batch-sizes 64,320 --steps 1 \
    --profiler nsys --name s_nsys
  job s_ncu 180 sweep "${A[@]}" --paths cuda-core,tc-fa2 --dists skew80 --batch-sizes 64,320 --steps 1 \
    --profiler ncu --name s_ncu
  job s_none 60 sweep "${A[@]}" --paths cuda-core --dists skew80 --batch-sizes 64,320 --steps 3 --profiler none \
    --name s_none
  job s_timing 60 timing "${B[@]}" --paths cuda-core,tc-fa2 --dists uniform,skew80 --batch-sizes 148,149 \
    --steps 10 --warmup 2 --name s_timing
  await $W3
  job s_auto 120 sweep "${B[@]}" --paths tc-auto --dists uniform,skew80 --batch-sizes 64,256 --steps 2 --name s_auto
  await $W4
  job s_fp8 120 sweep "${A[@]}" --kv-dtype fp8_e4m3 --paths cuda-core,tc-fa2 --dists skew80 --batch-sizes 64,320 \
    --steps 2 --name s_fp8
}

full() {
  warm core --paths cuda-core & W1=$!
  warm fa2 --paths tc-fa2 & W2=$!
  warm auto --paths tc-auto & W3=$!
  warm fp8 --paths cuda-core,tc-fa2 --kv-dtype fp8_e4m3 & W4=$!
  await $W1 $W2 $W3 $W4
  job sweep_A 150 sweep "${A[@]}" --paths cuda-core,tc-fa2 --batch-sizes $BS_A --steps 2
  job ncu_holdout 200 sweep "${A[@]}" --paths cuda-core --dists uniform,skew40,skew80,two40 \
    --batch-sizes 64,192,288,296,320 --steps 1 --profiler ncu --name ncu_holdout
  job sweep_B 150 sweep "${B[@]}" --paths cuda-core,tc-fa2,tc-auto --batch-sizes $BS_B --steps 2
  job serving_B 150 serving "${B[@]}" --paths cuda-core,tc-fa2 --steps 200 "${SERVE[@]}" --gzip-sidecar
  job serving_B_graph 150 serving "${B[@]}" --paths cuda-core,tc-fa2 --steps 200 "${SERVE[@]}" --cuda-graph \
    --gzip-sidecar
  job nsys_B 200 sweep "${B[@]}" --paths cuda-core,tc-fa2 --dists uniform,skew80 \
    --batch-sizes 32,64,128,148,149,192,256 --steps 2 --profiler nsys
  job ncu_B 200 sweep "${B[@]}" --paths cuda-core,tc-fa2 --dists uniform,skew80 --batch-sizes 32,128,148,149,256 \
    --steps 1 --profiler ncu
  job timing_A 120 timing "${A[@]}" --paths cuda-core,tc-fa2 --batch-sizes $BS_A --steps 20 --warmup 3
  job timing_B 150 timing "${B[@]}" --paths cuda-core,tc-fa2,tc-auto --batch-sizes $BS_B --steps 20 --warmup 3
  job timing_B_graph 120 timing "${B[@]}" --paths cuda-core,tc-fa2 --batch-sizes $BS_B --steps 20 --warmup 3 \
    --cuda-graph
  job sweep_A_fp8 120 sweep "${A[@]}" --kv-dtype fp8_e4m3 --paths cuda-core,tc-fa2 \
    --batch-sizes 16,64,128,224,231,232,256,320,384 --steps 2
  job nsys_serving_B_graph 150 serving "${B[@]}" --paths cuda-core --steps 100 "${SERVE[@]}" --cuda-graph \
    --profiler nsys --gzip-sidecar
}

check() {  # after code changes: the CUDA-graph runners and the torch session, small
  job c_sweep_graph 90 sweep "${A[@]}" --paths cuda-core,tc-fa2 --dists uniform,skew80 --batch-sizes 64,296,320 \
    --steps 2 --cuda-graph --name c_sweep_graph
  job c_serving_graph 90 serving "${B[@]}" --paths cuda-core,tc-fa2 --steps 40 "${SERVE[@]}" --cuda-graph \
    --name c_serving_graph
  job c_timing_graph 90 timing "${B[@]}" --paths cuda-core --dists skew80 --batch-sizes 144,148,149,160 --steps 10 \
    --warmup 2 --cuda-graph --name c_timing_graph
  job c_ncu_graph 120 sweep "${B[@]}" --paths cuda-core --dists skew80 --batch-sizes 148,149 --steps 1 --cuda-graph \
    --profiler ncu --name c_ncu_graph
}

# The decode loop (shape B). FA2: split-KV off from B = 33, so 48 requests; CUDA-core: off from B = 149, so 160,
# with shorter prompts and a 24K-token onset join (its attention several times slower, the step under 2x).
LOOP_FA2=(--paths tc-fa2 --batch 48)
LOOP_CORE=(--paths cuda-core --batch 160 --prompt-len 256:1024 --onset-len 24576)
LOOP_SMOKE=(--steps 26 --warmup 4
            --events host-sleep@3,host-cpu@6,prefill@9:4096,chunked-prefill@12:2048,long-join@16:12288,long-join@20)

# loop_summary DIR: step times and truth of every capture in DIR
loop_summary() {
  local sc trace
  for sc in "$1"/*.sidecar.json*; do
    [ -f "$sc" ] || continue
    for trace in "${sc%%.sidecar.json*}.pt.trace.json.gz" "${sc%%.sidecar.json*}.sqlite"; do
      [ -f "$trace" ] && python3 examples/loop/step_times.py "$trace" "$sc" 2>&1 | tee -a "$OUT/summary.txt"
    done
  done
}

loop() {  # loop [full]: with "full", the full runs only (no smoke loops first)
  warm core --paths cuda-core & W1=$!
  warm fa2 --paths tc-fa2 & W2=$!
  await $W1 $W2
  [ "${1:-}" = full ] && { loop_full; return; }
  local full=$C
  C=/tmp/smoke
  mkdir -p "$C"
  job s_loop_fa2 90 loop "${B[@]}" "${LOOP_FA2[@]}" "${LOOP_SMOKE[@]}" --name s_loop_fa2
  job s_loop_core_graph 90 loop "${B[@]}" "${LOOP_CORE[@]}" "${LOOP_SMOKE[@]}" --cuda-graph --name s_loop_core_graph
  job s_loop_core_graph_nsys 120 loop "${B[@]}" "${LOOP_CORE[@]}" "${LOOP_SMOKE[@]}" --cuda-graph --profiler nsys \
    --name s_loop_core_graph_nsys
  loop_summary "$C"
  tar czf "$OUT/smoke.tgz" -C /tmp smoke
  C=$full
  loop_full
}

loop_full() {
  job loop_fa2_torch 120 loop "${B[@]}" "${LOOP_FA2[@]}" --gzip-sidecar --name loop_fa2_torch
  job loop_core_torch 120 loop "${B[@]}" "${LOOP_CORE[@]}" --gzip-sidecar --name loop_core_torch
  job loop_core_graph_torch 120 loop "${B[@]}" "${LOOP_CORE[@]}" --cuda-graph --gzip-sidecar --name loop_core_graph_torch
  job loop_fa2_nsys 150 loop "${B[@]}" "${LOOP_FA2[@]}" --profiler nsys --drop-nsys-rep --gzip-sidecar \
    --name loop_fa2_nsys
  job loop_core_graph_nsys 150 loop "${B[@]}" "${LOOP_CORE[@]}" --cuda-graph --profiler nsys --drop-nsys-rep \
    --gzip-sidecar --name loop_core_graph_nsys
  loop_summary "$C"
}

# The captures of issues 27 and 29 (shape B, 2 layers: each Kineto trace near 0.5 MB). Mixed: 32 decode requests plus chunked prefills of 3000, 6000 and
# 1500 tokens in chunks of 1024 (partial last chunks), pure decode steps between them.
MIXED=(--batch 32 --layers 2 --chunk 1024 --events chunked-prefill@6:3000,chunked-prefill@16:6000,chunked-prefill@30:1500
       --gzip-sidecar)
BURST=(--paths tc-fa2 --batch 48 --layers 2 --events gemm-burst@20:4,gemm-burst@36:2 --gemm-factor 1.6
       --gzip-sidecar)

wanted() { [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]; }  # ONLY=name,name: just these

captures() {  # captures smoke|full|fa3 (full: ONLY=sdpa,mixed_fa2,mixed_fa3,burst,abtest picks some)
  if [ "${1:-full}" = fa3 ]; then  # FA3's A/A + A/B runs (carry .whl_fa3 instead of .whl)
    timeout $(( HARD - $(elapsed) - 20 )) python3 -m collectors.abtest --out "$C/abtest" --timeout 120 \
      --only fa3 --deadline $(( DEADLINE - $(elapsed) - 30 ))
    echo "abtest fa3 rc=$? at $(elapsed)s" | tee -a "$OUT/summary.txt"
    return
  fi
  warm core --paths cuda-core & W1=$!
  warm fa2 --paths tc-fa2 & W2=$!
  warm auto --paths tc-auto & W3=$!
  if [ "${1:-full}" = smoke ]; then
    timeout 120 python3 -m collectors.sdpa --out "$C" --name s_sdpa --tiny --steps 1
    echo "s_sdpa rc=$? at $(elapsed)s" | tee -a "$OUT/summary.txt"
    await $W1 $W2 $W3
    job s_burst 90 loop "${B[@]}" "${BURST[@]}" --steps 10 --warmup 3 --events gemm-burst@4:2 --name s_burst
    job s_mixed_fa2 90 loop "${B[@]}" --paths tc-fa2 --prefill-backend fa2 "${MIXED[@]}" --steps 10 --warmup 3 \
      --events chunked-prefill@3:1500 --name s_mixed_fa2
    job s_mixed_fa3 90 loop "${B[@]}" --paths tc-auto --prefill-backend fa3 "${MIXED[@]}" --steps 10 --warmup 3 \
      --events chunked-prefill@3:1500 --name s_mixed_fa3
    timeout 300 python3 -m collectors.abtest --out "$C/abtest" --tiny --only aa1,aa_nsys,ab_split_off,ab_cuda_core,ab_mlp103 \
      --timeout 90 --deadline $(( DEADLINE - $(elapsed) - 60 ))
    echo "s_abtest rc=$? at $(elapsed)s" | tee -a "$OUT/summary.txt"
  else
    if wanted sdpa; then
      timeout 200 python3 -m collectors.sdpa --out "$C/sdpa" --name sdpa_q32kv4d128_torch --steps 3
      echo "sdpa rc=$? at $(elapsed)s" | tee -a "$OUT/summary.txt"
    fi
    await $W1 $W2 $W3
    C0=$C; C=$C0/mixed
    job mixed_fa2 120 loop "${B[@]}" --paths tc-fa2 --prefill-backend fa2 "${MIXED[@]}" --steps 40 --warmup 6 \
      --name mixed_fa2_torch
    job mixed_fa3 120 loop "${B[@]}" --paths tc-auto --prefill-backend fa3 "${MIXED[@]}" --steps 40 --warmup 6 \
      --name mixed_sm90_torch
    C=$C0/gemm_burst
    job burst 120 loop "${B[@]}" "${BURST[@]}" --steps 46 --warmup 6 --name burst_fa2_torch
    C=$C0
    if wanted abtest; then
      timeout $(( HARD - $(elapsed) - 20 )) python3 -m collectors.abtest --out "$C/abtest" --timeout 120 \
        --deadline $(( DEADLINE - $(elapsed) - 30 ))
      echo "abtest rc=$? at $(elapsed)s" | tee -a "$OUT/summary.txt"
    fi
  fi
  for d in "$C" "$C"/*/; do loop_summary "$d"; done
}

if [ "${1:-full}" = fa3 ] || [ "${2:-}" = fa3 ]; then setup_fa3; else setup; fi
case "${1:-full}" in
  smoke) smoke ;;
  full) full ;;
  check) check ;;
  loop) loop "${2:-}" ;;
  fa3) fa3 "${2:-}" ;;
  captures) captures "${2:-full}" ;;
  *) echo "usage: $0 smoke|full|check|loop [full]|fa3 [full]|captures [smoke|full]"; exit 2 ;;
esac
pack
sleep 1
