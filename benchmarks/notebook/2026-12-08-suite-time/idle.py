"""idle.py CPU_SAMPLES TIMELINE_PREFIX: idle core-seconds of the machine while the suite ran, and which
tests the two workers were running when cores sat idle (each idle core-second shared by the tests then running)."""
import json, sys, glob, collections, gzip
open_any = lambda f: gzip.open(f, 'rt') if f.endswith('.gz') else open(f)
samples = []
for line in open_any(sys.argv[1]):
    p = line.split()
    t = float(p[0]); j = list(map(int, p[2:]))
    idle = j[3] + j[4]; total = sum(j[:8])
    samples.append((t, idle, total))
rows = [json.loads(l) for f in glob.glob(sys.argv[2] + ".*") for l in open_any(f)]
t0 = min(r[2] for r in rows); t1 = max(r[3] for r in rows)
HZ, CORES = 100, 2
idle_cs = 0.0; busy_cs = 0.0; blame = collections.Counter(); blame_file = collections.Counter()
for (ta, ia, sa), (tb, ib, sb) in zip(samples, samples[1:]):
    if tb < t0 or ta > t1: continue
    dt = tb - ta
    idle = (ib - ia) / HZ; tot = (sb - sa) / HZ
    idle_cs += idle; busy_cs += tot - idle
    mid = (ta + tb) / 2
    running = [r[1] for r in rows if r[2] <= mid <= r[3]]
    for n in running:
        blame[n] += idle / max(len(running), 1)
        blame_file[n.split("::")[0]] += idle / max(len(running), 1)
print(f"window {t1 - t0:.0f} s: busy {busy_cs:.0f} core-s, idle {idle_cs:.0f} core-s ({100 * idle_cs / (idle_cs + busy_cs):.0f}%)")
print("idle core-s by file (shared among the tests running then):")
for f, v in blame_file.most_common(20): print(f"  {v:6.1f} {f}")
print("by test:")
for f, v in blame.most_common(20): print(f"  {v:6.1f} {f[:120]}")
