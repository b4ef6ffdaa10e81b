#!/usr/bin/env bash
# issue 14 item 4: a LARGE real .nsys-rep whose `nsys export` takes seconds, and SIGINT / SIGTERM / SIGKILL sent to
# `traceinsight analyze` while nsys is exporting it. Run from the repository root on the GPU machine, with
# $C (default .cap14c) holding this folder's files, the wheels of pyproject.toml's duckdb / orjson / adbc-driver-*
# in $C/whl, libdw's debs in $C/debs and, optionally, another traceinsight to compare in $C/src.
# Writes big.nsys-rep into $W (default /tmp/w); results under $OUT.
# Only the report:  STEPS=7000 LAYERS=16 bash big.sh capture
set -u
REPO=$PWD; C=${C:-$PWD/.cap14c}; W=${W:-/tmp/w}; OUT=${OUT:-/tmp/out}; R=$OUT/r; mkdir -p $W/rep $R
STEPS=${STEPS:-7000}; LAYERS=${LAYERS:-16}
T0=$(date +%s.%N); el() { python3 -c "import time;print(f'{time.time()-$T0:.1f}')"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $C/whl/*.whl || exit 1
mkdir -p /tmp/dw; for f in $C/debs/*.deb; do dpkg -x $f /tmp/dw; done
DW=/tmp/dw/usr/lib/x86_64-linux-gnu:/tmp/dw/lib/x86_64-linux-gnu
NS=${NS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
$NS --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uname -r
cd $W
if [ ! -f rep/big.nsys-rep ]; then
  echo "== profile $STEPS x $LAYERS at $(el)s"
  $NS profile -t cuda,nvtx --sample=none --cpuctxsw=none --backtrace=none --force-overwrite=true -o big \
    python3 $C/work_big.py $STEPS $LAYERS
  if [ ! -f big.nsys-rep ] && [ -f big.qdstrm ]; then  # this nsys leaves only the .qdstrm here
    Q=$(ls $(dirname $(dirname $NS))/*/QdstrmImporter | head -1); echo "== import at $(el)s: $Q"
    LD_LIBRARY_PATH=$DW $Q -i big.qdstrm
  fi
  ls -la; [ -f big.nsys-rep ] || { echo NO REPORT; exit 1; }
  mv big.nsys-rep rep/
fi
sha256sum rep/big.nsys-rep; stat -c '%s bytes' rep/big.nsys-rep
echo "== export timing at $(el)s"
for i in 1 2; do
  t0=$(date +%s.%N); $NS export --type sqlite --force-overwrite true -o direct.sqlite rep/big.nsys-rep >$R/direct_$i.log 2>&1
  echo "nsys export rc=$? $(python3 -c "import time;print(round(time.time()-$t0,2))") s" | tee -a $R/export_times
done
tail -1 $R/export_times | awk '{print $4}' > $R/export_secs
ls -la direct.sqlite
[ "${1:-}" = capture ] && exit 0
echo "== interrupts at $(el)s"
export NS W R C REPO PYTHONUNBUFFERED=1
python3 $C/interrupt_big.py
echo "== end at $(el)s"
