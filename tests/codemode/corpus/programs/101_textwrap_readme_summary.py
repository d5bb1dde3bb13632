import json
import textwrap

readme = await tools.read_file(path="README.md")
hits = json.loads(await tools.search_web(query="actors state tools", limit=3))
paragraphs = [p.replace("\n", " ") for p in readme.split("\n\n") if p and not p.startswith("#")]
body = " ".join(paragraphs)

print(textwrap.fill(body, width=40, initial_indent="> ", subsequent_indent="> "))
print()
print(textwrap.shorten("Related: " + "; ".join(h["title"] for h in hits), width=60, placeholder=" [...]"))
print(textwrap.indent(textwrap.dedent("""
    Next steps:
      1. read src/app.py
      2. fix TODOs
""").strip(), "    "))
