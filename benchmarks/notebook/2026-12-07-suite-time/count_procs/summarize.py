import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
starts = [r for r in rows if r["kind"] == "start" and "no:xdist" not in r["orig"]]
ends = {r["pid"]: r["cpu"] for r in rows if r["kind"] == "end"}
by = collections.defaultdict(list)
for r in starts:
    t = r["test"].split("::")[-1].split(" (")[0] if r["test"] else "?"
    by[t].append(r)
tot_acc = tot_rank = 0
for t, rs in by.items():
    acc = sum(1 for r in rs if r["orig"][1:3] == ["-m", "accelerate.commands.launch"])
    cli = sum(1 for r in rs if "cli.main" in r["orig"])
    tot_acc += acc
    print(f"{t[:80]:80s} procs={len(rs):3d} accelerate={acc:2d} cli={cli:2d} cpu(clean exits)={sum(ends.get(r['pid']) or 0 for r in rs):6.1f}")
print("total procs", len(starts), "accelerate launches", tot_acc)
print("log", sys.argv[1])
