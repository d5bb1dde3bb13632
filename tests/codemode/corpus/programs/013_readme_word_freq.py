import re
from collections import Counter

readme = await tools.read_file(path="README.md")
words = re.findall(r"[a-z]+", readme.lower())
stop = {"a", "the", "that", "of", "and", "to", "run"}
freq = Counter(w for w in words if w not in stop and len(w) > 2)
print(f"{len(words)} words total, {len(freq)} distinct non-stopwords")
for word, n in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:8]:
    print(f"{word:>12} {'#' * n}")
