"""summary.html: one self-contained page (no script, nothing fetched), every link resolves,
the latency bands count every call, failed episodes come first and open, cards are capped."""

import json
from html.parser import HTMLParser

import pytest

from dsh_actors.eval import report_html
from dsh_actors.eval.report_html import render_html
from dsh_actors.eval.reports import EpisodeReport, summary_of
from dsh_actors.log import FrameFile, tool_result_event

T = 30


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links, self.fetches, self.tags, self.open = set(), [], [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if "id" in attrs:
            self.ids.add(attrs["id"])
            if tag == "details" and "open" in attrs:
                self.open.append(attrs["id"])
        if tag == "a":
            self.links.append(attrs.get("href", ""))
        for key in ("src", "srcset", "data"):
            if key in attrs:
                self.fetches.append(attrs[key])
        if tag == "link":
            self.fetches.append(attrs.get("href", ""))


def make_run(tmp_path, count):
    logs = tmp_path / "logs"
    logs.mkdir()
    reports = []
    for i in range(count):
        report = EpisodeReport(id=f"ep-{i}", agent=f"agent-{i}", status="failed" if i == 3 else "ok",
                               message="its runner died twice" if i == 3 else "")
        for n, (tool, ms) in enumerate([("bash", 3.0 + i), ("read_file", 0.4), ("bash", 700.0 if i == 5 else 12.0)]):
            report.calls += 1
            report.ok += 1
            report.latencies_ms.append(ms)
            report.call_tools.append(tool)
        reports.append(report)
        with FrameFile(logs / f"ep-{i}.log") as log:
            log.append({"type": "user/message", "content": f"task <{i}>"})
            log.append(tool_result_event({"command": "echo <b>hi</b>"}, "bash", {
                "call_id": f"c{i}", "content": [{"type": "text", "text": "<b>hi</b>\n"}], "is_error": False}))
    return reports, logs


@pytest.mark.timeout(T)
def test_the_page_is_self_contained_its_links_resolve_and_it_escapes_what_the_log_holds(tmp_path):
    reports, logs = make_run(tmp_path, 12)
    summary = summary_of(reports, [], 1.5)
    page = render_html(summary, reports, logs)
    parsed = Page()
    parsed.feed(page)
    assert "script" not in parsed.tags and parsed.fetches == [] and "http" not in page.replace(
        "http-equiv", "")  # nothing is fetched, nothing runs
    assert all(link.startswith("#") and link[1:] in parsed.ids for link in parsed.links) and parsed.links
    assert "<b>hi</b>" not in page and "&lt;b&gt;hi&lt;/b&gt;" in page  # the log's text is text
    assert parsed.open == ["ep-ep-3"]  # a failed episode's cards are open
    # Latency by tool: every call counted once in its band (bash: 24 calls, 1 of them ≥ 500 ms).
    bash = page.split("<td>bash</td>", 1)[1].split("</tr>", 1)[0]
    assert "<td class=n>24</td>" in bash and 'title="500 ms–1 s: 1 call(s)"' in bash
    # The first bash call of each episode takes 3+i ms (10..14 ms: 5 of them), the second 12 ms (11) or 700.
    assert 'title="10 ms–50 ms: 16 call(s)"' in bash and 'title="1 ms–5 ms: 2 call(s)"' in bash
    assert page.index("ep-3 (failed — its runner died twice)") < page.index("ep-0 (ok)")


@pytest.mark.timeout(T)
def test_a_large_run_carries_cards_for_a_bounded_number_of_episodes(tmp_path, monkeypatch):
    monkeypatch.setattr(report_html, "CARDS_FOR", 5)
    reports, logs = make_run(tmp_path, 40)
    page = render_html(summary_of(reports, [], 1.0), reports, logs)
    parsed = Page()
    parsed.feed(page)
    cards = [i[3:] for i in parsed.ids if i.startswith("ep-ep-")]
    assert len(cards) == 5 and "ep-3" in cards and "ep-5" in cards  # the failed one and the slowest among them
    assert "Cards of 5 of 40 episodes" in page and page.count("<tr><td>") >= 40  # the table still lists all
    assert json.dumps(summary_of(reports, [], 1.0))  # the summary it was made from is plain JSON
