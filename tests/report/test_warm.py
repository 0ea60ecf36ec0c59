"""The report's templates are compiled while cells run, not after the last one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_maka import report
from pytest_maka.core.stats import summarize
from pytest_maka.core.taxonomy import Status
from pytest_maka.plugin import reporter
from pytest_maka.report import html

from .test_stats import rec


def test_warm_compiles_the_report_template_and_what_it_includes(monkeypatch: pytest.MonkeyPatch) -> None:
    env = html.environment()
    env.cache.clear()
    report.warm()
    cached = {name for _, name in env.cache}
    assert {html.TEMPLATE, *html.INCLUDED_TEMPLATES} <= cached
    loads: list[str] = []
    original = env.loader.load  # type: ignore[union-attr]
    monkeypatch.setattr(env.loader, "load", lambda e, name, g=None: loads.append(name) or original(e, name, g))
    summary, records = _tiny_page()
    text = html.render_html(summary, records, cohort="warm")
    assert "<html" in text and loads == []  # the render compiled nothing: every template was ready


def test_the_included_templates_are_the_ones_the_report_includes() -> None:
    source = (html.TEMPLATES_DIR / html.TEMPLATE).read_text()
    included = {line.split('"')[1] for line in source.splitlines() if "{% include" in line}
    assert included == set(html.INCLUDED_TEMPLATES)


def test_the_reporter_warms_once_after_waiting_long_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    calls: list[int] = []
    monkeypatch.setattr(reporter.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(report, "warm", lambda: calls.append(1))
    fake = SimpleNamespace(_waiting_since=None)
    warm = reporter.MakaReporter._warm_views
    warm(fake)  # the first wait starts the clock
    now[0] += reporter.WARM_AFTER_SEC / 2
    warm(fake)
    assert calls == []  # cells that finish quickly leave no idle time to fill
    now[0] += reporter.WARM_AFTER_SEC
    warm(fake)
    warm(fake)
    now[0] += 100
    warm(fake)
    assert calls == [1]


def test_a_failing_warm_up_changes_nothing_for_the_item_that_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(reporter.time, "monotonic", lambda: now[0])

    def broken() -> None:
        raise RuntimeError("a template that does not compile")

    monkeypatch.setattr(report, "warm", broken)
    fake = SimpleNamespace(_waiting_since=None)
    reporter.MakaReporter._warm_views(fake)
    now[0] += reporter.WARM_AFTER_SEC
    reporter.MakaReporter._warm_views(fake)  # no exception reaches the waiting item
    assert fake._waiting_since == float("inf")


def _tiny_page():
    records = [rec("t1", "s1", Status.AGENT_SUCCESS), rec("t2", "s1", Status.AGENT_FAILURE)]
    return summarize(records), records
