import json
from collections import Counter

users = json.loads(await tools.run_sql(query="select * from users"))
domains = Counter(u["email"].split("@")[1] for u in users)
tlds = Counter(d.rsplit(".", 1)[1] for d in domains.elements())
print("By domain:", domains.most_common())
print("By TLD:", sorted(tlds.items()))
non_com = [u["email"] for u in users if not u["email"].endswith(".com")]
print("Non-.com addresses:", non_com)
