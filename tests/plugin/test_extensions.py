"""Third-party extensions load through the ``pytest_maka.adapters`` entry-point group."""

from __future__ import annotations

import textwrap

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]

ADAPTER = '''
"""A third-party plugin adding a subject kind, without touching the kernel."""
from pydantic import BaseModel, ConfigDict

from pytest_maka.subjects.base import SubjectBase


class ShoutOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    word: str


class Shout(SubjectBase):
    kind = "shout"
    reference = False
    Options = ShoutOptions

    def run(self, sandbox, task, ctx):
        return self._exec(sandbox, f"echo {self.options.word} > /app/done.txt", task, ctx)


def pytest_maka_subject_kinds():
    return {"shout": Shout}
'''


@pytest.fixture
def installed_adapter(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real distribution on sys.path whose entry point is in the pytest_maka.adapters group."""
    site = cohort.root / "site"
    (site / "shout_adapter.py").parent.mkdir()
    (site / "shout_adapter.py").write_text(ADAPTER)
    dist = site / "shout_adapter-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shout-adapter\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [pytest_maka.adapters]
            shout = shout_adapter
            """
        )
    )
    monkeypatch.setenv("PYTHONPATH", str(site))


def test_entry_point_adapter_adds_a_subject_kind(cohort: Cohort, installed_adapter: None) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "loud", "kind": "shout", "word": "HEY"}])
    result = cohort.run_subprocess()
    result.assert_outcomes(passed=1)
    assert cohort.results()["t[loud-r0]"]["subject_kind"] == "shout"


def test_autoload_can_be_disabled(cohort: Cohort, installed_adapter: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    cohort.task("t")
    cohort.write(subjects=[{"name": "loud", "kind": "shout", "word": "HEY"}])
    result = cohort.run_subprocess("-p", "maka", "-p", "xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*subjects[[]0[]].kind: unknown subject kind 'shout'*"])


def test_missing_bubblewrap_is_one_line_before_any_cell(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    cohort.task("t")
    cohort.write()
    monkeypatch.setenv("PATH", str(cohort.root))  # a PATH where no bwrap is to be found
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert errors == [
        f"ERROR: {cohort.spec}: this host lacks bubblewrap (bwrap) (for the local executor): apt-get install bubblewrap"
    ]
    assert not (cohort.out / "attempts.jsonl").exists()


BARE_KIND = '''
from pydantic import BaseModel, ConfigDict


class BareOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Bare:
    """Written against the required members only (no SubjectBase)."""

    kind = "bare"
    reference = False
    Options = BareOptions

    def __init__(self, spec):
        self.spec = spec

    def run(self, sandbox, task, ctx):
        raise AssertionError("never run")


def pytest_maka_subject_kinds():
    return {"bare": Bare}
'''


def test_a_kind_lacking_part_of_its_contract_is_one_line_before_any_cell(cohort: Cohort) -> None:
    cohort.pytester.makeconftest(BARE_KIND)
    cohort.task("t")
    cohort.write(subjects=[{"name": "b", "kind": "bare"}])
    result = cohort.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert errors == [
        "ERROR: subject 'b' (Bare) lacks egress, env, host_needs, mounts, secrets, setup_egress, unsupported, uploads,"
        " version_problem of the Subject contract (pytest_maka/subjects/base.py; subclass SubjectBase for the defaults)"
    ]
    assert not (cohort.out / "attempts.jsonl").exists()
