# tl.py PREFIX [min_s]: per worker, the tests it ran and each file's busy seconds, from timeline_plugin.py logs (PREFIX.gw0...)
import json,sys,glob,collections,gzip
open_any=lambda f: gzip.open(f,'rt') if f.endswith('.gz') else open(f)
rows=[json.loads(l) for f in glob.glob(sys.argv[1]+'.*') for l in open_any(f)]
t0=min(r[2] for r in rows)
by=collections.defaultdict(list)
for w,n,a,b in rows: by[w].append((a-t0,b-t0,n))
for w in sorted(by):
    L=sorted(by[w]); print(w, 'n',len(L),'end %.0f'%L[-1][1], 'busy %.0f'%sum(b-a for a,b,_ in L))
    # per-file aggregates in order
    agg=collections.OrderedDict()
    for a,b,n in L:
        f=n.split('::')[0].split('/')[-1]
        x=agg.setdefault(f,[a,b,0,0]); x[1]=b; x[2]+=b-a; x[3]+=1
    for f,(a,b,s,c) in agg.items():
        if s>float(sys.argv[2] if len(sys.argv)>2 else 5): print('   %-40s %4d tests start %6.0f end %6.0f busy %6.1f'%(f,c,a,b,s))
