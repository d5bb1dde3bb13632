import re
from functools import total_ordering

@total_ordering
class Version:
    def __init__(self, text):
        self.parts = tuple(int(p) for p in text.split("."))

    def __eq__(self, other):
        return self.parts == other.parts

    def __lt__(self, other):
        return self.parts < other.parts

    def __repr__(self):
        return "v" + ".".join(map(str, self.parts))

# the model guesses that bumped dependency versions are mentioned somewhere
log = await tools.bash(command="git log --oneline")
readme = await tools.read_file(path="README.md")
found = re.findall(r"\d+\.\d+(?:\.\d+)?", log + readme)
candidates = [Version(v) for v in found] or [Version(v) for v in ["1.10.0", "1.9.3", "1.2", "2.0.1", "1.10"]]
print("parsed:", candidates)
print("sorted:", sorted(candidates))
print("max:", max(candidates), "| >= 1.10 :", [v for v in candidates if v >= Version("1.10")])
