import json
from itertools import combinations, product, permutations, chain
from collections import Counter

orders = json.loads(await tools.list_orders())
pairs = Counter()
for o in orders:
    skus = sorted({i["sku"] for i in o["items"]})
    pairs.update(combinations(skus, 2))
print("co-purchased pairs:", pairs.most_common())

all_skus = sorted(set(chain.from_iterable((i["sku"] for i in o["items"]) for o in orders)))
print("all skus:", all_skus)
bundles = [b for b in combinations(all_skus, 2) if b not in pairs]
print("never bought together:", bundles)
print("size/colour variants:", ["-".join(p) for p in product(["S", "L"], ["red", "blue"])])
print("ranking orders of 3 skus:", len(list(permutations(all_skus))))
