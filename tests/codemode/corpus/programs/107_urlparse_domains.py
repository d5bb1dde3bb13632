import json
from collections import defaultdict
from urllib.parse import urlencode, urljoin, urlparse

results = json.loads(await tools.search_web(query="python ray agents json regular", limit=10))
by_host = defaultdict(list)
for r in results:
    parts = urlparse(r["url"])
    by_host[parts.netloc].append(parts.path)

for host in sorted(by_host):
    print(f"{host}: {sorted(by_host[host])}")

base = "https://docs.example.org/"
print(urljoin(base, "asyncio/tasks.html"))
print("share link:", "https://share.example.com/?" + urlencode({"q": "python json", "n": len(results), "src": "agent"}))
