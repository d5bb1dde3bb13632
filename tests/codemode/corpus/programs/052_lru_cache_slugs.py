import json
from functools import lru_cache

@lru_cache(maxsize=None)
def slugify(text: str) -> str:
    out = []
    for ch in text.lower():
        if ch.isalnum():
            out.append(ch)
        elif out and out[-1] != "-":
            out.append("-")
    return "".join(out).strip("-")

results = json.loads(await tools.search_web(query="python agents json regular", limit=10))
titles = [r["title"] for r in results] * 3
slugs = [slugify(t) for t in titles]
for title in dict.fromkeys(titles):
    print(f"{title!r:32} -> {slugify(title)}")
info = slugify.cache_info()
print(f"cache hits={info.hits} misses={info.misses} size={info.currsize}")
