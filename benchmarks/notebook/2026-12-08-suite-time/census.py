"""census.py PROCS.jsonl: CPU seconds (clean exits) by kind of Python process the suite started."""
import json, sys, collections, gzip
rows = [json.loads(l) for l in (gzip.open(sys.argv[1], "rt") if sys.argv[1].endswith(".gz") else open(sys.argv[1]))]
starts = {r["pid"]: r for r in rows if r["kind"] == "start"}
ends = {r["pid"]: r["cpu"] for r in rows if r["kind"] == "end"}
def kind(r):
    o = " ".join(r["orig"])
    a = r["argv"]
    if "exec(eval(sys.stdin" in o: return "pytest worker"
    if "-m pytest" in o: return "pytest main"
    if "accelerate.commands.launch" in o: return "accelerate launch (torchrun agent)"
    if "launcher.pdeathsig" in o or (a and a[0].endswith("pdeathsig.py")): return "launch shim"
    if "launcher.recipes." in o or (a and "launcher/recipes/" in a[0]): return "rank: built-in recipe"
    if "cli.main" in o or (a and a[0].endswith("cli/main.py")): return "advise (cli.main)"
    if a and a[0].endswith(".py") and "/tests/scripts/" in a[0]: return "rank or child: tests/scripts"
    if a and a[0].endswith(".py"): return "other script"
    if a and a[0] == "-c": return "python -c"
    if a and a[0] == "-m": return "python -m " + (o.split(" -m ", 1)[1].split()[0] if " -m " in o else "?")
    return "other"
agg = collections.defaultdict(lambda: [0, 0, 0.0])
for pid, r in starts.items():
    k = kind(r); agg[k][0] += 1
    if pid in ends and ends[pid] is not None:
        agg[k][1] += 1; agg[k][2] += ends[pid]
tot = sum(v[2] for v in agg.values())
print(f"{'kind':40s} {'procs':>6s} {'clean':>6s} {'CPU-s':>8s} {'per proc':>8s}")
for k, (n, c, cpu) in sorted(agg.items(), key=lambda kv: -kv[1][2]):
    print(f"{k:40s} {n:6d} {c:6d} {cpu:8.1f} {cpu / max(c, 1):8.2f}")
print(f"{'all':40s} {sum(v[0] for v in agg.values()):6d} {sum(v[1] for v in agg.values()):6d} {tot:8.1f}")
if len(sys.argv) > 2:  # other scripts' names
    c = collections.Counter()
    for pid, r in starts.items():
        if kind(r) in ("other script", "other", "python -c") or kind(r).startswith("python -m "):
            c[(kind(r), " ".join(r["argv"][:2])[-60:])] += ends.get(pid) or 0
    for k, v in c.most_common(25): print(f"  {v:7.1f} {k}")
