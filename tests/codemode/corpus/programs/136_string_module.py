import string
from collections import Counter

readme = await tools.read_file(path="README.md")
clean = readme.translate(str.maketrans("", "", string.punctuation))
letters = Counter(ch for ch in clean.lower() if ch in string.ascii_lowercase)
print("top letters:", letters.most_common(5))
print("missing letters:", "".join(ch for ch in string.ascii_lowercase if ch not in letters))
print(string.capwords("inventory-service stock tracker", sep=" "))
title = readme.splitlines()[0].strip("# ")
print(string.capwords(title.replace("-", " ")))

formatter = string.Formatter()
fields = [name for _, name, _, _ in formatter.parse("{service} on {host}:{port:d}") if name]
print("template fields:", fields)
print("digits in log:", sum(ch in string.digits for ch in await tools.read_file(path="logs/app.log")))
