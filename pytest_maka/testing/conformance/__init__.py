"""The executor conformance suite: lifecycle, isolation and tamper properties, against a real executor.

Subclass ``ExecutorConformance`` in a test module (name the subclass ``Test...``) and
provide an ``executor`` fixture. Override ``make_task`` when the executor needs more from a
task (e.g. a ``docker_image``), and the class attributes below to declare what the executor
does not offer. Commands are POSIX ``sh``; the network probes also need ``python3`` inside.
"""

from __future__ import annotations

from .base import SECRET_NAME, SECRET_VALUE, TOKEN, WORKSPACE_FILES, ConformanceBase, Run, make_cell, make_task
from .contract import ContractTests
from .denominator import DenominatorTests
from .egress import EgressTarget, EgressTests
from .files import FileTests
from .isolation import IsolationTests
from .lifecycle import LifecycleTests
from .spawn import SpawnTests
from .taint import TaintTests
from .tamper import TamperTests
from .verdict import VerdictChannelTests


class ExecutorConformance(
    ContractTests,
    LifecycleTests,
    IsolationTests,
    FileTests,
    SpawnTests,
    EgressTests,
    VerdictChannelTests,
    TaintTests,
    TamperTests,
    DenominatorTests,
    ConformanceBase,
):
    """Lifecycle, isolation, tamper, verdict-channel and denominator tests every executor must pass."""


__all__ = [
    "SECRET_NAME",
    "SECRET_VALUE",
    "TOKEN",
    "WORKSPACE_FILES",
    "ConformanceBase",
    "ContractTests",
    "DenominatorTests",
    "EgressTarget",
    "EgressTests",
    "ExecutorConformance",
    "Run",
    "TaintTests",
    "VerdictChannelTests",
    "make_cell",
    "make_task",
]
