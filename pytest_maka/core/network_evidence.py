"""A line in a verifier's output saying it could not resolve or reach a host (pure).

Most published ``test.sh`` scripts download their tools (apt, curl | sh for uv, pip, npm)
and write reward 0 when that fails. The line found is a diagnostic on the record: it tells
the experimenter that the verifier probably needs the network its task declares. Alone it never
takes an attempt out of the denominator (``core.taxonomy``): the verifier runs code the subject
left, which can print any line. It does when the harness confirms it on its own side: the host
is one the task's own verifier files name (``named_hosts``), and that phase could not reach it
(no network granted, or the harness cannot resolve or connect to it either: ``run/network_check.py``).
Only failures to resolve or reach a remote host count: a refused connection to localhost is the
task's own service.
"""

from __future__ import annotations

import re

#: Each pattern is the way one real tool says it could not resolve or reach a host.
_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"Could not resolve host: (?P<host>[^\s'\"]+)",  # curl (6), git
        r"Temporary failure resolving '(?P<host>[^']+)'",  # apt
        r"unable to resolve host address \W?(?P<host>[\w.-]+)",  # wget (quotes the host in curly quotes)
        r"Resolving (?P<host>\S+) \([^)]*\)\.\.\. failed",  # wget
        r"getaddrinfo (?:EAI_AGAIN|ENOTFOUND) (?P<host>\S+)",  # npm, node
        r"Temporary failure in name resolution",  # glibc: pip, python, wget
        r"Name or service not known",  # glibc
        r"No address associated with hostname",  # glibc
        r"failed to lookup address information",  # uv, cargo (rust)
        r"Could not resolve proxy: (?P<host>\S+)",  # curl through a proxy
        r"Network is unreachable",  # any tool, no route out
        r"CONNECT tunnel failed, response 40[37]",  # curl: the egress proxy refused the host
        r"Failed to connect to (?P<host>[^\s:]+) port \d+",  # curl (7)
    )
)
_LOCAL = re.compile(r"^(localhost|127(\.\d+){3}|::1|\[::1\]|0\.0\.0\.0)$", re.IGNORECASE)
#: How much of an output is searched (its end: a long test log ends with the failure).
TAIL_CHARS = 1 << 20
MAX_EVIDENCE_CHARS = 200


def network_failure(output: str) -> str | None:
    """The first output line showing a failed name resolution or an unreachable remote host.

    None when there is none. A line naming a local host (localhost, 127.x, ::1) is skipped.
    """
    for line in output[-TAIL_CHARS:].splitlines():
        for pattern in _PATTERNS:
            match = pattern.search(line)
            if match is None:
                continue
            host = match.groupdict().get("host")
            if host and _LOCAL.match(host.strip("[]'\"\u2018\u2019").rstrip(".")):
                continue
            return _around(line.strip(), match.group(0))
    return None


#: A host in a URL the verifier's files name (``scheme://[user@]host[:port]``) or in an scp-like git remote.
_URL_HOST = re.compile(
    r"\b(?:https?|ftp|git|ssh)://(?:[^@/\s'\"]+@)?(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
)
_GIT_HOST = re.compile(r"\bgit@(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9]):")
#: Tools that download from a well-known host without naming it.
_IMPLIED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bpip3? install\b|\buvx? (?:pip |tool |run |sync|add)|\buvx\b"), "pypi.org"),
    (re.compile(r"\bapt(?:-get)? (?:-\S+ )*(?:update|install)\b"), "deb.debian.org"),
    (re.compile(r"\bnpm (?:install|ci|i)\b|\bnpx\b"), "registry.npmjs.org"),
)
MAX_NAMED_HOSTS = 16


def failed_host(evidence: str) -> str | None:
    """The remote host an evidence line names (None: the line names none, e.g. glibc's message)."""
    for pattern in _PATTERNS:
        match = pattern.search(evidence)
        if match is None:
            continue
        host = (match.groupdict().get("host") or "").strip("[]'\"\u2018\u2019.,;:")
        if host and not _LOCAL.match(host):
            return host.lower()
    return None


def named_hosts(text: str) -> tuple[str, ...]:
    """The remote hosts a verifier's own files name, in order of appearance (at most MAX_NAMED_HOSTS).

    URLs and git remotes, plus the registry a bare ``pip install``, ``apt-get install`` or
    ``npm install`` reaches. Local hosts are left out: they are the task's own services.
    """
    found: dict[str, None] = {}
    for pattern in (_URL_HOST, _GIT_HOST):
        for match in pattern.finditer(text):
            host = match.group("host").lower().rstrip(".")
            if "." in host and not _LOCAL.match(host):
                found.setdefault(host, None)
    for pattern, host in _IMPLIED:
        if pattern.search(text):
            found.setdefault(host, None)
    return tuple(found)[:MAX_NAMED_HOSTS]


def _around(line: str, matched: str) -> str:
    """The line, or the part of it around the match when it is longer than MAX_EVIDENCE_CHARS."""
    if len(line) <= MAX_EVIDENCE_CHARS:
        return line
    at = line.find(matched)
    room = max(0, MAX_EVIDENCE_CHARS - 6 - len(matched))
    start = max(0, at - room // 2)
    part = line[start : start + MAX_EVIDENCE_CHARS - 6]
    return ("..." if start else "") + part + "..."
