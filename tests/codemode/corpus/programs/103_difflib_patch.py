import difflib

original = await tools.read_file(path="src/app.py")
patched = original.replace("DEBUG = False", "DEBUG = os.environ.get('DEBUG') == '1'")
patched = patched.replace("    # TODO: read config from env\n", "")
patched = patched.replace("  # TODO: remove", "")

diff = list(difflib.unified_diff(original.splitlines(keepends=True), patched.splitlines(keepends=True),
                                 fromfile="a/src/app.py", tofile="b/src/app.py"))
print("".join(diff), end="")
ratio = difflib.SequenceMatcher(None, original, patched).ratio()
print(f"similarity: {ratio:.3f}")
print(await tools.write_file(path="src/app.py", content=patched))
remaining = (await tools.read_file(path="src/app.py")).count("TODO")
print("TODOs remaining:", remaining)
