"""``kind: acp``: any agent that speaks the Agent Client Protocol, driven over its stdio inside the sandbox.

``AcpSubject`` is imported on first use: the ACP library (hundreds of pydantic models) costs
a second or more of start-up, which a cohort without an ACP subject should not pay.
"""

from typing import Any

from .options import AcpOptions

__all__ = ["AcpOptions", "AcpSubject"]


def __getattr__(name: str) -> Any:
    if name == "AcpSubject":
        from .subject import AcpSubject

        return AcpSubject
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
