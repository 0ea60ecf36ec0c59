"""``egress.log``: one JSON line per connection attempt of an attempt, allowed or refused."""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .wire import stamp

LOG_NAME = "egress.log"
#: The reason of an event for a packet sent past the proxy (refused in the sandbox, never sent).
PAST_PROXY = "not through the egress proxy: refused in the sandbox"


@dataclass(frozen=True)
class EgressEvent:
    """One request the egress proxy saw."""

    time: str
    phase: str
    method: str
    destination: str
    allowed: bool
    #: Bytes the connection carried both ways (counted by the relay; null when it saw none).
    bytes: int | None = None
    reason: str | None = None
    #: Bytes from the sandbox towards the destination, and back (headers included).
    bytes_out: int | None = None
    bytes_in: int | None = None
    #: The server name of a TLS tunnel's ClientHello (null when none was seen).
    sni: str | None = None
    #: The status codes of the HTTP answers that came back, in order: a plain request's (the
    #: destination's, or the proxy's when it answered for it) and a tunnel's not to port 443
    #: (keep-alive: each answer); null when none was read (TLS, no answer).
    statuses: list[int] | None = None


@dataclass
class _Flow:
    first: float
    method: str
    destination: str
    bytes: int = 0


class PastProxyFlows:
    """Packets refused in the sandbox, one event per flow (protocol, source port, destination).

    At most ``cap`` flows are kept (a subject may send to a million addresses); packets of
    flows past the cap are only counted, in ``unlogged``. Thread-safe.
    """

    def __init__(self, cap: int = 1000) -> None:
        self.cap = cap
        self._flows: dict[tuple[str, int | None, str], _Flow] = {}
        #: Packets of flows past the cap.
        self.unlogged = 0
        self._lock = threading.Lock()

    def add(self, when: float, method: str, sport: int | None, destination: str, nbytes: int) -> None:
        key = (method, sport, destination)
        with self._lock:
            flow = self._flows.get(key)
            if flow is None:
                if len(self._flows) >= self.cap:
                    self.unlogged += 1
                    return
                flow = self._flows[key] = _Flow(when, method, destination)
            flow.bytes += nbytes

    def events(self, phase: str) -> list[EgressEvent]:
        """One refused event per flow, in the order their first packets came."""
        with self._lock:
            flows = sorted(self._flows.values(), key=lambda f: f.first)
        return [
            EgressEvent(
                time=stamp(f.first),
                phase=phase,
                method=f.method,
                destination=f.destination,
                allowed=False,
                bytes=f.bytes,
                reason=PAST_PROXY,
                bytes_out=f.bytes,
                bytes_in=0,
            )
            for f in flows
        ]


class EgressLog:
    """Appends events to ``<attempt_dir>/egress.log`` and keeps per-phase counts for the record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._events: list[EgressEvent] = []
        #: Per phase, what the executor adds to the phase's record (e.g. ``off_proxy``).
        self._notes: dict[str, dict[str, Any]] = {}

    def note(self, phase: str, **fields: Any) -> None:
        """Add ``fields`` to phase ``phase``'s record (a later note of the same key wins)."""
        with self._lock:
            self._notes.setdefault(phase, {}).update(fields)

    def extend(self, events: list[EgressEvent]) -> None:
        if not events:
            return
        with self._lock:
            self._events.extend(events)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                for event in events:
                    f.write(json.dumps(asdict(event), separators=(",", ":")) + "\n")

    def events(self, phase: str | None = None) -> list[EgressEvent]:
        with self._lock:
            return [e for e in self._events if phase is None or e.phase == phase]

    def summary(self, phase: str) -> dict[str, Any]:
        """Counts, and refused destination -> times (most frequent first), of one phase."""
        events = self.events(phase)
        refused = Counter(e.destination for e in events if not e.allowed)
        with self._lock:
            notes = dict(self._notes.get(phase, {}))
        return {
            "connections": {"allowed": sum(e.allowed for e in events), "refused": sum(refused.values())},
            "refused_destinations": dict(refused.most_common()),
            **notes,
        }


def read_events(path: Path) -> list[EgressEvent]:
    """The events of an ``egress.log`` (lines that do not parse are skipped)."""
    out: list[EgressEvent] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(EgressEvent(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out
