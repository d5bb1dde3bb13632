import keyword
import re
from collections import Counter

source = await tools.read_file(path="src/app.py")
code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
code = re.sub(r"(['\"]).*?\1", "''", code)
tokens = re.findall(r"[A-Za-z_]\w*", code)
idents = Counter(t for t in tokens if not keyword.iskeyword(t))
kws = Counter(t for t in tokens if keyword.iskeyword(t))
print("identifiers:", idents.most_common(5))
print("keywords:", sorted(kws.items()))
