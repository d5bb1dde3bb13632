import asyncio

lines = ["hello world", "good morning", "thanks", "hello good world", "see you"]
limit = asyncio.Semaphore(2)
order = []

async def translate(i, text):
    async with limit:
        result = await tools.translate(text=text, target="pt")
        order.append(i)
        return i, result

pairs = await asyncio.gather(*(translate(i, t) for i, t in enumerate(lines)))
untranslated = []
for (i, result), source in zip(pairs, lines):
    ratio = sum(a != b for a, b in zip(source.split(), result.split())) / len(source.split())
    print(f"{i}: {source!r} -> {result!r} ({ratio:.0%} of words translated)")
    if ratio == 0:
        untranslated.append(source)
print("needs a human:", untranslated)
