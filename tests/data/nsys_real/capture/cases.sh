# the analyze cases; env from run.sh (NS, W, R, OUT)
set -u
cd $W
tm() { python3 -c 'import time;print(f"{time.time():.3f}")'; }
an() {  # an NAME ARGS...: run analyze, keep stdout/stderr/rc/seconds
  local n=$1; shift; local t0 t1; t0=$(tm)
  python3 -m traceinsight analyze "$@" >$R/$n.out 2>$R/$n.err; local rc=$?; t1=$(tm)
  echo "$n rc=$rc secs=$(python3 -c "print(round($t1-$t0,3))") err=$(head -c 600 $R/$n.err | tr '\n' '|')" | tee -a $R/summary.txt
}
lsc() { echo "-- cache $1:"; ls -la --time-style=+%s.%N $1/nsys 2>&1; }
export PATH=$(dirname $NS):$PATH TRACEINSIGHT_CACHE_DIR=/tmp/tc1
which nsys
an a1_export small.nsys-rep --format json; lsc /tmp/tc1
an a2_reuse small.nsys-rep --format json; lsc /tmp/tc1
an a3_text small.nsys-rep; cp $R/a3_text.out $R/a3_text.txt
cp /tmp/tc1/nsys/*.sqlite $OUT/small.sqlite
an a4_sqlite $OUT/small.sqlite --format json
$NS export --type sqlite --force-overwrite true -o direct.sqlite small.nsys-rep; echo "direct export rc=$?"
an a5_direct direct.sqlite --format json
S=$(stat -c %s small.nsys-rep)
head -c $((S/2)) small.nsys-rep > trunc.nsys-rep
cp small.nsys-rep flip.nsys-rep
python3 -c "
p='flip.nsys-rep';b=bytearray(open(p,'rb').read());m=len(b)//2
for i in range(m,m+4096): b[i]^=0xFF
open(p,'wb').write(b)"
sha256sum trunc.nsys-rep flip.nsys-rep > $R/damaged.sha
export TRACEINSIGHT_CACHE_DIR=/tmp/tc2
an b1_trunc trunc.nsys-rep --format json; lsc /tmp/tc2
an b2_flip flip.nsys-rep --format json; lsc /tmp/tc2
sha256sum -c $R/damaged.sha
$NS export --type sqlite --force-overwrite true -o t.sqlite trunc.nsys-rep > $R/nsys_trunc.txt 2>&1; echo "nsys trunc rc=$?" | tee -a $R/summary.txt
$NS export --type sqlite --force-overwrite true -o f.sqlite flip.nsys-rep > $R/nsys_flip.txt 2>&1; echo "nsys flip rc=$?" | tee -a $R/summary.txt
ls -la t.sqlite f.sqlite 2>&1
# interrupted exports: signal python once our temporary export appears
set -m  # background jobs must not start with SIGINT ignored (non-interactive bash does that)
for sig in INT TERM KILL; do
  export TRACEINSIGHT_CACHE_DIR=/tmp/ti_$sig NSYS=$NS
  t0=$(tm); python3 -m traceinsight analyze small.nsys-rep --format json >$R/c_$sig.out 2>$R/c_$sig.err & P=$!
  for i in $(seq 1 400); do { ls /tmp/ti_$sig/nsys/.*tmp* >/dev/null 2>&1 || pgrep -f "nsys export" >/dev/null; } && break; sleep 0.02; done
  sleep 0.15
  echo "seen tmp after $(python3 -c "print(round($(tm)-$t0,3))")s: $(ls -a /tmp/ti_$sig/nsys 2>&1 | tr '\n' ' ')"
  ps -eo pid,pgid,sid,args | grep -E "nsys|traceinsight" | grep -v grep
  kill -$sig $P; wait $P; echo "c_$sig rc=$? err=$(tr '\n' '|' < $R/c_$sig.err | head -c 600)" | tee -a $R/summary.txt
  sleep 0.3; ps -eo pid,args | grep -E "nsys|QdstrmImp" | grep -v grep; lsc /tmp/ti_$sig
  sleep 3; echo after 3s; lsc /tmp/ti_$sig
  an d_$sig small.nsys-rep --format json; lsc /tmp/ti_$sig
  cmp <(python3 -c "import json,sys;d=json.load(open('$R/d_$sig.out'));print(d.get('findings'))") <(python3 -c "import json;d=json.load(open('$R/a1_export.out'));print(d.get('findings'))") && echo "d_$sig findings same as a1"
done
unset NSYS
# a SIGKILLed run's own leftover tmp is removed by the next export; a foreign live-pid tmp kept
