"""``kind: acp``: any agent that speaks the Agent Client Protocol, driven over its stdio inside the sandbox."""

from .subject import AcpOptions, AcpSubject

__all__ = ["AcpOptions", "AcpSubject"]
