import json

queries = ["python tutorial", "agents tools", "regular expressions", "json"]
seen = {}
for q in queries:
    hits = json.loads(await tools.search_web(query=q, limit=3))
    for h in hits:
        entry = seen.setdefault(h["url"], {**h, "queries": []})
        entry["queries"].append(q)

ranked = sorted(seen.values(), key=lambda h: (len(h["queries"]), h["score"]), reverse=True)
for h in ranked:
    print(f"{h['score']:.2f} {h['title']:<28} matched by {len(h['queries'])} queries")
return [h["url"] for h in ranked[:3]]
