import json
from operator import attrgetter, itemgetter, methodcaller
from collections import namedtuple

users = json.loads(await tools.run_sql(query="select * from users"))
by_country_name = sorted(users, key=itemgetter("country", "name"))
print([(u["country"], u["name"]) for u in by_country_name])

U = namedtuple("U", "name plan active")
objs = [U(u["name"], u["plan"], u["active"]) for u in users]
print([o.name for o in sorted(objs, key=attrgetter("plan", "name"))])
upper = list(map(methodcaller("upper"), map(attrgetter("name"), objs)))
print(upper)
emails = sorted(map(itemgetter("email"), users), key=str.lower)
print(emails)
