import asyncio
import json

def chunks(seq, size):
    for i in range(0, len(seq), size):
        yield seq[i:i + size]

user_ids = list(range(1, 9))
found, missing = [], []
for batch_no, batch in enumerate(chunks(user_ids, 3), 1):
    results = await asyncio.gather(*(tools.get_user(user_id=u) for u in batch), return_exceptions=True)
    for uid, r in zip(batch, results):
        if isinstance(r, Exception):
            missing.append(uid)
        else:
            found.append(json.loads(r))
    print(f"batch {batch_no}: ids {batch} -> {sum(not isinstance(r, Exception) for r in results)} ok")

print("found:", ", ".join(u["name"] for u in found))
print("missing ids:", missing)
