import json, sys, glob, statistics as st, os
out = sys.argv[1]
res = {}
for d in sorted(glob.glob(out + "/*_[0-9]*")):
    if not os.path.isdir(d): continue
    name = os.path.basename(d); mode = name.rsplit("_",1)[0]
    try:
        m = json.load(open(d + "/results.json"))["meta"]
    except Exception as e:
        print(name, "no results", e); continue
    s, e = map(float, open(d + ".wall").read().split())
    t = m["scale"]["timeline"]; it = t["items"]
    before = t["started_at"] - s
    r = dict(wall=e - s, before=before, first_back=it[0]["done_s"], first=it[0]["seconds"],
             items=sum(i["seconds"] for i in it), rest=sum(i["seconds"] for i in it[1:]),
             span_gap=it[-1]["done_s"] - it[0]["done_s"] - sum(i["seconds"] for i in it[1:]),
             after=e - s - before - it[-1]["done_s"])
    res.setdefault(mode, []).append(r)
    print(name, " ".join(f"{k} {v:.2f}" for k, v in r.items()))
for mode, rs in res.items():
    print("MEDIAN", mode, " ".join(f"{k} {st.median(r[k] for r in rs):.2f}" for k in rs[0]))
