import json

class Report:
    def __init__(self, title, rows):
        self.title = title
        self.rows = rows

    def header(self):
        return self.title

    def format_row(self, row):
        return " ".join(str(v) for v in row.values())

    def render(self):
        lines = [self.header()]
        lines += [self.format_row(r) for r in self.rows]
        lines.append(self.footer())
        return "\n".join(lines)

    def footer(self):
        return f"({len(self.rows)} rows)"

class MarkdownReport(Report):
    def header(self):
        cols = list(self.rows[0])
        return f"# {self.title}\n\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)

    def format_row(self, row):
        return "| " + " | ".join(str(v) for v in row.values()) + " |"

class CsvReport(Report):
    def header(self):
        return ",".join(self.rows[0])

    def format_row(self, row):
        return ",".join(str(v) for v in row.values())

    def footer(self):
        return super().footer().replace("(", "# ").replace(")", "")

rows = json.loads(await tools.run_sql(query="select id, total, status from orders where status = 'pending'"))
rows = [{"id": r["id"], "total": r["total"], "status": r["status"]} for r in rows]
for cls in (Report, MarkdownReport, CsvReport):
    print(f"--- {cls.__name__} ---")
    print(cls("Pending orders", rows).render())
