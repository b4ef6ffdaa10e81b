#!/usr/bin/env bash
# FlashInfer API logging next to a collector sweep: trace + sidecar + FlashInfer's own log (and level-10 dumps)
# of the same run. Run from the repository root with .whl carried (collectors/run_on_device.sh's wheels).
set -u
START=$(date +%s)
OUT=${OUT:-/tmp/filog-out}
C=$OUT/filog
mkdir -p "$C"
exec > >(tee -a "$OUT/device.log") 2>&1
elapsed() { echo $(( $(date +%s) - START )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/*.whl || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=/tmp/fiws TORCH_CPP_LOG_LEVEL=ERROR
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -c "import torch, flashinfer, nvtx; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'flashinfer', flashinfer.__version__, torch.cuda.get_device_name())"
A=(--qo-heads 32 --kv-heads 4 --head-dim 128)
# job NAME LEVEL SAFETENSORS TIMEOUT ARGS...: one sweep with FlashInfer API logging at LEVEL into $C
job() {
  local name=$1 level=$2 st=$3 tmo=$4; shift 4
  local t0; t0=$(date +%s)
  echo "=== $name level=$level safetensors=$st: $*"
  (cd "$C" && FLASHINFER_LOGLEVEL=$level FLASHINFER_LOGDEST="$name.flashinfer.log" \
    FLASHINFER_DUMP_DIR="${name}_dumps" FLASHINFER_DUMP_INCLUDE='*.plan' FLASHINFER_DUMP_SAFETENSORS=$st \
    timeout "$tmo" python3 -m collectors "$@" --name "$name" --out .)
  echo "$name rc=$? $(( $(date +%s) - t0 ))s (at $(elapsed)s)" | tee -a "$OUT/summary.txt"
}
# 1. level 10 (torch.save dumps of plan() inputs), CUDA-core + FA2, around both split thresholds (297, 66)
job sweep_l10 10 0 300 sweep "${A[@]}" --paths cuda-core,tc-fa2 --dists uniform,skew80 \
  --batch-sizes 32,64,66,128,296,297,320 --steps 2
# 2. level 10 with safetensors dumps, one step per plan
job sweep_l10st 10 1 120 sweep "${A[@]}" --paths cuda-core,tc-fa2 --dists skew80 --batch-sizes 64,66,296,297 --steps 1
# 3. level 3: names, scalars, tensor metadata only
job sweep_l3 3 0 120 sweep "${A[@]}" --paths cuda-core --dists uniform,skew80 --batch-sizes 16,297 --steps 1
# 4. level 10, a continuous-batching replay: one plan() per step, batch and lengths change every step
job serving_l10 10 0 150 serving "${A[@]}" --paths cuda-core,tc-fa2 --steps 30 --max-batch 96 --initial 64 \
  --arrival-rate 1.0 --prompt-len 512:4096 --output-len 16:64 --long-every 25 --long-len 65536
ls -la "$C" "$C"/*_dumps | head -80
du -sh "$C"/*
tar czf "$OUT/filog.tgz" -C "$OUT" filog && rm -rf "$C"
ls -la "$OUT"
echo "total $(elapsed)s"
