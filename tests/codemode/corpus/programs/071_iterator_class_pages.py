import json

class Paginator:
    def __init__(self, items, page_size):
        self.items = items
        self.page_size = page_size
        self.page = 0

    def __iter__(self):
        return self

    def __next__(self):
        start = self.page * self.page_size
        if start >= len(self.items):
            raise StopIteration
        self.page += 1
        return self.page, self.items[start:start + self.page_size]

    def __len__(self):
        return -(-len(self.items) // self.page_size)

orders = json.loads(await tools.list_orders())
pages = Paginator(sorted(orders, key=lambda o: -o["total"]), page_size=4)
print(f"{len(orders)} orders in {len(pages)} pages")
for number, chunk in pages:
    print(f"page {number}: " + ", ".join(f"#{o['id']} ${o['total']:g}" for o in chunk))
print("exhausted:", next(pages, None) is None)
