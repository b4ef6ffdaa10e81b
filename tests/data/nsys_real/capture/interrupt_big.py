# Run by big.sh on the GPU machine: SIGINT / SIGTERM / SIGKILL to `traceinsight analyze big.nsys-rep` while the
# real nsys is exporting it, then a second run. For each traceinsight to compare ("repo": the checkout's; "src":
# $C/src when present). Env from big.sh: NS (nsys), W (work folder, report in $W/rep), R (results), C, REPO.
# Prints one summary line per case and writes $R/cases.json.
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

NS, W, R, C = os.environ["NS"], Path(os.environ["W"]), Path(os.environ["R"]), Path(os.environ["C"])
REP = W / "rep" / "big.nsys-rep"
SITE = "/tmp/site"
VARIANTS = {"repo": os.environ["REPO"]}  # the checkout big.sh was run from
if (C / "src" / "traceinsight").is_dir():
    VARIANTS["src"] = str(C / "src")
results = []
# the signal goes this long after nsys started: a third of a plain export's time (big.sh measured it)
SIGNAL_AFTER_S = max(1.0, float((R / "export_secs").read_text().split()[0]) / 3)
print("signal after", SIGNAL_AFTER_S, "s; variants", VARIANTS, flush=True)


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def procs() -> dict[int, tuple[int, int, int, str, str]]:
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                rest = (d / "stat").read_text().rsplit(")", 1)[1].split()
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
            except (OSError, IndexError):
                continue
            out[int(d.name)] = (int(rest[1]), int(rest[2]), int(rest[3]), rest[0], cmd)  # ppid pgid sid state cmd
    return out


def tree(pid: int) -> list[int]:
    """Live descendants of pid, plus the members of their sessions."""
    ps = procs()
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for q, (ppid, _, _, st, _) in ps.items():
            if ppid == p and st not in "ZX" and q not in found:
                found.append(q)
                todo.append(q)
    sids = {ps[p][2] for p in found}
    found += [q for q, v in ps.items() if v[2] in sids and q not in found and q != pid and v[3] not in "ZX"]
    return found


def alive(pids: list[int]) -> list[int]:
    ps = procs()
    return [p for p in pids if p in ps and ps[p][3] not in "ZX"]


def listing(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(f"{p.name}:{p.stat().st_size}" for p in folder.iterdir() if p.exists())


def env_for(variant: str, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{SITE}:{VARIANTS[variant]}", "TRACEINSIGHT_CACHE_DIR": str(cache), "NSYS": NS}


def analysis(text: str) -> dict:
    doc = json.loads(text)
    for part in (doc["trace"], doc["summary"]):
        for key in ("path", "format", "trace"):
            part.pop(key, None)
    return doc


def analyze(variant: str, path: Path, cache: Path) -> tuple[int, str, str, float]:
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, "-m", "traceinsight", "analyze", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        env=env_for(variant, cache),
        cwd="/tmp",  # not the checkout: `python -m` puts the working folder first on sys.path
        timeout=400,
    )
    return p.returncode, p.stdout, p.stderr, round(time.time() - t0, 2)


rep_sha = sha(REP)
base = {}
for v in VARIANTS:
    rc, out, err, secs = analyze(v, W / "direct.sqlite", Path(f"/tmp/cd_{v}"))
    print(f"[{v}] analyze direct.sqlite rc={rc} {secs}s err={err.strip()[:300]!r}", flush=True)
    base[v] = analysis(out)
    shutil.rmtree(f"/tmp/cc_{v}", ignore_errors=True)
    rc, out, err, secs = analyze(v, REP, Path(f"/tmp/cc_{v}"))
    same = rc == 0 and analysis(out) == base[v]
    s = json.loads(out)["summary"] if rc == 0 else {}
    print(
        f"[{v}] analyze big.nsys-rep, empty cache: rc={rc} {secs}s same_as_direct={same} kernels={s.get('kernels')} "
        f"steps={s.get('steps')} cache={listing(Path(f'/tmp/cc_{v}/nsys'))} err={err.strip()[:300]!r}",
        flush=True,
    )
    results.append({"case": f"{v}/clean", "rc": rc, "secs": secs, "same": same})

cases = [(v, s, m) for v in VARIANTS for s, m in (("INT", ""), ("TERM", ""), ("KILL", "wait"), ("KILL", "rerun"))]
if "src" in VARIANTS:
    cases = [c for c in cases if not (c[0] == "src" and c[2] == "rerun")]
for v, signame, mode in cases:
    sig = getattr(signal, f"SIG{signame}")
    name = f"{v}/{signame}{'-' + mode if mode else ''}"
    cache = Path(f"/tmp/ci_{v}_{signame}_{mode}")
    shutil.rmtree(cache, ignore_errors=True)
    folder = cache / "nsys"
    rec = {"case": name}
    t0 = time.time()
    p = subprocess.Popen(
        [sys.executable, "-m", "traceinsight", "analyze", str(REP), "--format", "json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env_for(v, cache),
        cwd="/tmp",
    )
    nsys = []
    while p.poll() is None and time.time() - t0 < 60:
        nsys = tree(p.pid)
        if any("nsys" in procs().get(q, (0, 0, 0, "", ""))[4] for q in nsys):
            break
        time.sleep(0.005)
    t_seen = time.time()
    rec["nsys_seen_after_s"] = round(t_seen - t0, 2)
    time.sleep(SIGNAL_AFTER_S)
    nsys = tree(p.pid) or nsys
    ps = procs()
    rec["tree_at_signal"] = [
        f"{q} ppid={ps[q][0]} pgid={ps[q][1]} sid={ps[q][2]} {ps[q][3]} {ps[q][4]}" for q in nsys if q in ps
    ]
    rec["cache_at_signal"] = listing(folder)
    rec["running_at_signal"] = p.poll() is None and bool(alive(nsys[:1]))
    ts = time.time()
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    rec["rc"], rec["stderr"], rec["exit_after_s"] = (
        p.returncode,
        err.decode(errors="replace"),
        round(time.time() - ts, 2),
    )
    rec["cache_at_exit"] = listing(folder)
    limit = 300 if mode == "wait" else (0 if mode == "rerun" else 15)
    snaps = []
    while alive(nsys) and time.time() - ts < limit:
        if len(snaps) < 40 and int((time.time() - ts) * 2) >= len(snaps):
            snaps.append(f"{time.time() - ts:.1f}s {listing(folder)}")
        time.sleep(0.01)
    rec["nsys_alive_after_exit"] = alive(nsys)
    rec["nsys_gone_after_s"] = None if alive(nsys) else round(time.time() - ts, 2)
    rec["snaps"] = snaps
    time.sleep(0.3)
    rec["cache_after"] = listing(folder)
    rec["beside_report"] = listing(REP.parent)
    rec["report_unchanged"] = sha(REP) == rep_sha
    rc, out, err2, secs = analyze(v, REP, cache)
    rec["again"] = {"rc": rc, "secs": secs, "stderr": err2[:300], "same": rc == 0 and analysis(out) == base[v]}
    if mode == "rerun":  # the orphan went on beside the second run: when does it end, what did it leave
        while alive(nsys) and time.time() - ts < 300:
            time.sleep(0.05)
        rec["orphan_gone_after_s"] = None if alive(nsys) else round(time.time() - ts, 2)
        time.sleep(0.3)
    rec["cache_final"] = listing(folder)
    rec["beside_report_final"] = listing(REP.parent)
    results.append(rec)
    print(
        f"[{name}] seen={rec['nsys_seen_after_s']}s running_at_signal={rec['running_at_signal']} rc={rec['rc']} "
        f"stderr={rec['stderr'].strip()!r} exit_after={rec['exit_after_s']}s "
        f"nsys_gone_after={rec['nsys_gone_after_s']} "
        f"alive={rec['nsys_alive_after_exit']} at_signal={rec['cache_at_signal']} at_exit={rec['cache_at_exit']} "
        f"after={rec['cache_after']} beside={rec['beside_report']} unchanged={rec['report_unchanged']} "
        f"again={rec['again']} final={rec['cache_final']} orphan_gone={rec.get('orphan_gone_after_s')}",
        flush=True,
    )
    (R / "cases.json").write_text(json.dumps(results, indent=1))
    for line in rec["tree_at_signal"]:
        print("    ", line)
    for line in snaps[:12]:
        print("    snap", line)
(R / "cases.json").write_text(json.dumps(results, indent=1))
