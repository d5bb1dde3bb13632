import json

results = json.loads(await tools.search_web(query="python json asyncio", limit=5))
lines = ["## Search results", ""]
for i, r in enumerate(sorted(results, key=lambda r: r["score"], reverse=True), 1):
    lines.append(f"{i}. [{r['title']}]({r['url']}) — {r['snippet']} _(score {r['score']:.2f})_")
print("\n".join(lines))
