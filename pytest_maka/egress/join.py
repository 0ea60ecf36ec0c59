"""One egress event per request: tinyproxy's decision joined to the relay's record of its connection."""

from __future__ import annotations

import json
from collections import defaultdict, deque
from dataclasses import replace
from typing import Any

from . import tinyproxy
from .log import EgressEvent

#: Reasons for which the relay cut a tunnel tinyproxy had opened.
CUT = ("sni mismatch", "not a TLS ClientHello")
DNS_REASON = "names are resolved by the proxy, never in the sandbox"


def relay_records(text: str) -> list[dict[str, Any]]:
    """The relay's JSON lines (lines that do not parse are skipped)."""
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def joined(requests: list[tuple[EgressEvent, str]], relayed: list[dict[str, Any]], phase: str) -> list[EgressEvent]:
    """tinyproxy's events with the bytes and SNI of their connection; relay-only records added, all in time order.

    A request is joined to the first unjoined relay record with the same request line
    (connections to one destination are matched in order). A record nobody joined (DNS,
    a connection that never sent a request line) becomes an event of its own, refused.
    """
    queues: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
    extra: list[EgressEvent] = []
    for rec in relayed:
        if rec.get("kind") == "dns":
            extra.append(_dns(rec, phase))
        elif rec.get("request") is not None:
            queues[str(rec["request"])].append(rec)
        else:
            extra.append(_orphan(rec, phase))
    out: list[EgressEvent] = []
    for event, line in requests:
        queue = queues.get(line)
        out.append(_with(event, queue.popleft()) if queue else event)
    for queue in queues.values():
        extra += [_orphan(rec, phase) for rec in queue]
    return sorted(out + extra, key=lambda e: e.time)


def _with(event: EgressEvent, rec: dict[str, Any]) -> EgressEvent:
    sent, got = int(rec.get("bytes_out") or 0), int(rec.get("bytes_in") or 0)
    cut = rec.get("reason") in CUT
    return replace(
        event,
        bytes=sent + got,
        bytes_out=sent,
        bytes_in=got,
        sni=rec.get("sni"),
        statuses=_statuses(rec.get("statuses")),
        allowed=event.allowed and not cut,
        reason=str(rec["reason"]) if cut and event.allowed else event.reason,
    )


def _statuses(value: Any) -> list[int] | None:
    """The relay's ``statuses`` (a list of status codes), or None."""
    found = [s for s in value if isinstance(s, int) and not isinstance(s, bool)] if isinstance(value, list) else []
    return found or None


def _orphan(rec: dict[str, Any], phase: str) -> EgressEvent:
    """A connection the proxy logged no request for."""
    line = rec.get("request")
    method, dest, _ = tinyproxy.destination(str(line)) if line else ("?", "?", "")
    sent, got = int(rec.get("bytes_out") or 0), int(rec.get("bytes_in") or 0)
    return EgressEvent(
        time=str(rec.get("time") or ""),
        phase=phase,
        method=method,
        destination=dest,
        allowed=False,
        bytes=sent + got,
        bytes_out=sent,
        bytes_in=got,
        reason=str(rec.get("reason") or ("not a proxy request" if not line else "the proxy logged no request")),
    )


def _dns(rec: dict[str, Any], phase: str) -> EgressEvent:
    return EgressEvent(
        time=str(rec.get("time") or ""),
        phase=phase,
        method="DNS",
        destination=f"{rec.get('name') or '?'}:53",
        allowed=False,
        bytes=int(rec.get("bytes_out") or 0),
        bytes_out=int(rec.get("bytes_out") or 0),
        bytes_in=0,
        reason=DNS_REASON,
    )
