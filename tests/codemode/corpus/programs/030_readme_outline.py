readme = await tools.read_file(path="README.md")
outline = []
for line in readme.splitlines():
    if line.startswith("#"):
        level = len(line) - len(line.lstrip("#"))
        outline.append("  " * (level - 1) + "- " + line.lstrip("# ").strip())
print("\n".join(outline))
code_spans = [seg for i, seg in enumerate(readme.split("`")) if i % 2 == 1]
print("Commands mentioned:", code_spans)
