phrases = ["Hello world", "Good morning", "Thanks", "See you tomorrow"]
translations = {}
for p in phrases:
    translations[p] = await tools.translate(text=p, target="pt")

for src, dst in translations.items():
    changed = "" if src.lower() != dst else "  (unchanged)"
    print(f"{src!r:>22} -> {dst!r}{changed}")
return translations
