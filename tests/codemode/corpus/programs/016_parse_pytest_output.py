import re

out = await tools.bash(command="pytest -q tests/")
print(out)
summary = re.search(r"(?:(\d+) failed)?,?\s*(?:(\d+) passed)?\s+in\s+([\d.]+)s", out)
failed = int(summary.group(1) or 0)
passed = int(summary.group(2) or 0)
collected = int(re.search(r"collected (\d+) items", out).group(1))
assert failed + passed == collected, "counts don't add up"
status = "FAIL" if failed else "OK"
return f"{status}: {passed}/{collected} passed, {failed} failed in {summary.group(3)}s"
