import asyncio
import json

topics = ["asyncio", "actors", "json", "regex", "tools"]
responses = await asyncio.gather(*(tools.search_web(query=t, limit=2) for t in topics))
by_topic = {t: json.loads(r) for t, r in zip(topics, responses)}

merged = {}
for topic, hits in by_topic.items():
    if not hits:
        print(f"no results for {topic!r}")
    for h in hits:
        merged.setdefault(h["url"], h)

for h in sorted(merged.values(), key=lambda h: -h["score"]):
    print(f"{h['score']:.2f}  {h['title']}")
return {"topics_with_hits": sum(bool(v) for v in by_topic.values()), "unique_urls": len(merged)}
