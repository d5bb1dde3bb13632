import json
from typing import Protocol, TypedDict

class OrderRow(TypedDict):
    id: int
    user_id: int
    total: float
    status: str

class Scorer(Protocol):
    def score(self, order: OrderRow) -> float: ...

class ValueScorer:
    def score(self, order: OrderRow) -> float:
        return order["total"]

class UrgencyScorer:
    weights = {"pending": 3.0, "shipped": 1.5, "delivered": 0.2, "cancelled": 0.0}

    def score(self, order: OrderRow) -> float:
        return self.weights[order["status"]] * (1 + order["total"] / 100)

def rank(orders: list[OrderRow], scorer: Scorer, top: int = 3) -> list[int]:
    return [o["id"] for o in sorted(orders, key=scorer.score, reverse=True)[:top]]

rows: list[OrderRow] = json.loads(await tools.run_sql(query="select * from orders"))
for scorer in (ValueScorer(), UrgencyScorer()):
    print(f"{type(scorer).__name__:<14} top3 = {rank(rows, scorer)}")
