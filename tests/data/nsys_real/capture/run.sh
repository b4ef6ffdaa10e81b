#!/usr/bin/env bash
# issue 14b: traceinsight analyze on a real .nsys-rep with the device's real nsys. Run from the repo root.
set -u
C=$PWD/.cap14b; W=/tmp/w; R=$OUT/r; mkdir -p $W $R
exec > >(tee -a $OUT/log.txt) 2>&1
T0=$(date +%s.%N); el() { python3 -c "import time;print(f'{time.time()-$T0:.2f}')"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $C/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$C/src PYTHONUNBUFFERED=1
mkdir -p /tmp/dw; for f in $C/debs/*.deb; do dpkg -x $f /tmp/dw; done
DW=/tmp/dw/usr/lib/x86_64-linux-gnu:/tmp/dw/lib/x86_64-linux-gnu
NS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
ls /opt/nvidia/nsight-compute/*/host/; $NS --version; nvidia-smi --query-gpu=name,driver_version --format=csv; uname -r
python3 -c "import traceinsight,duckdb,pyarrow,torch;print(traceinsight.__file__,duckdb.__version__,pyarrow.__version__,torch.__version__)"
cd $W
echo "== profile at $(el)"
$NS profile -t cuda,nvtx --sample=none --cpuctxsw=none --backtrace=none --force-overwrite=true -o small python3 $C/work.py
ls -la
if [ ! -f small.nsys-rep ] && [ -f small.qdstrm ]; then
  Q=$(ls /opt/nvidia/nsight-compute/2025.3.1/host/*/QdstrmImporter | head -1); echo "importer $Q"
  LD_LIBRARY_PATH=$DW $Q -i small.qdstrm; ls -la
fi
[ -f small.nsys-rep ] || { echo NO REPORT; exit 1; }
cp small.nsys-rep $OUT/; sha256sum small.nsys-rep
export NS W R C; bash $C/cases.sh
echo "== end at $(el)"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
