"""IPv4 packets a sandbox sent past the egress proxy: what they were, and the refusal to send back.

Pure functions over bytes (the local executor's TUN device hands over whole IP packets):
``parse`` names a packet's flow, ``refusal`` builds the answer the sandbox's own stack turns
into an immediate error: a TCP reset for TCP (``connect`` fails with ``ECONNREFUSED``), an
ICMP "port unreachable" for UDP (a connected socket's next call fails with ``ECONNREFUSED``)
and "communication administratively prohibited" for an ICMP echo or another protocol.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

TCP, UDP, ICMP = 6, 17, 1
#: Protocol names as egress.log writes them (others: ``IP/<number>``), as on the Docker executor.
PROTOCOLS = {ICMP: "ICMP", TCP: "TCP", UDP: "UDP", 58: "ICMPv6", 132: "SCTP"}
_RST, _SYN, _FIN, _ACK = 0x04, 0x02, 0x01, 0x10
_ECHO = 8


@dataclass(frozen=True)
class Packet:
    """The fields of an IPv4 packet this module reads."""

    proto: int
    src: bytes
    dst: bytes
    #: Total length (IP header included), as the IP header says.
    length: int
    header_len: int
    #: Ports (TCP, UDP; the first fragment only), else None.
    sport: int | None = None
    dport: int | None = None
    #: TCP only: flags, sequence and acknowledgment numbers, payload length.
    flags: int = 0
    seq: int = 0
    ack: int = 0
    payload: int = 0
    #: ICMP only: the message type.
    icmp_type: int | None = None

    @property
    def method(self) -> str:
        return PROTOCOLS.get(self.proto, f"IP/{self.proto}")

    @property
    def destination(self) -> str:
        host = socket.inet_ntoa(self.dst)
        return f"{host}:{self.dport}" if self.dport is not None else host


def parse(data: bytes) -> Packet | None:
    """The packet's fields, or None for anything but a well-formed IPv4 header."""
    if len(data) < 20 or data[0] >> 4 != 4:
        return None
    ihl = (data[0] & 0x0F) * 4
    if ihl < 20 or len(data) < ihl:
        return None
    length, frag, proto = struct.unpack_from("!H2xH1xB", data, 2)
    first = frag & 0x1FFF == 0
    fields: dict[str, int] = {}
    if first and proto == TCP and len(data) >= ihl + 20:
        sport, dport, seq, ack, off, flags = struct.unpack_from("!HHIIBB", data, ihl)
        payload = max(min(length, len(data)) - ihl - (off >> 4) * 4, 0)
        fields = {"sport": sport, "dport": dport, "seq": seq, "ack": ack, "flags": flags, "payload": payload}
    elif first and proto == UDP and len(data) >= ihl + 8:
        fields = dict(zip(("sport", "dport"), struct.unpack_from("!HH", data, ihl), strict=True))
    elif first and proto == ICMP and len(data) > ihl:
        fields = {"icmp_type": data[ihl]}
    return Packet(proto, data[12:16], data[16:20], length, ihl, **fields)


def refusal(data: bytes, p: Packet) -> bytes | None:
    """The packet to write back so the sender's call fails at once (None: nothing to answer)."""
    if p.proto == TCP and p.sport is not None:
        return _tcp_reset(p)
    if p.proto == UDP and p.sport is not None:
        return _unreachable(data, p, code=3)  # port unreachable: ECONNREFUSED
    if p.proto in (TCP, UDP) or (p.proto == ICMP and p.icmp_type != _ECHO):
        return None  # a later fragment (its first was answered), or an ICMP error or reply
    return _unreachable(data, p, code=13 if p.proto == ICMP else 2)  # prohibited / protocol unreachable


def _tcp_reset(p: Packet) -> bytes | None:
    if p.flags & _RST:
        return None
    if p.flags & _ACK:
        seq, ack, flags = p.ack, 0, _RST
    else:
        seq, ack, flags = 0, (p.seq + p.payload + bool(p.flags & _SYN) + bool(p.flags & _FIN)) & 0xFFFFFFFF, _RST | _ACK
    assert p.sport is not None and p.dport is not None
    tcp = struct.pack("!HHIIBBHHH", p.dport, p.sport, seq, ack, 5 << 4, flags, 0, 0, 0)
    pseudo = p.dst + p.src + struct.pack("!BBH", 0, TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
    return _ip(p.dst, p.src, TCP, tcp)


def _unreachable(data: bytes, p: Packet, code: int) -> bytes:
    """ICMP destination unreachable from the destination, quoting the header and 8 bytes (RFC 792)."""
    quoted = data[: p.header_len + 8]
    icmp = struct.pack("!BBHI", 3, code, 0, 0) + quoted
    icmp = icmp[:2] + struct.pack("!H", checksum(icmp)) + icmp[4:]
    return _ip(p.dst, p.src, ICMP, icmp)


def _ip(src: bytes, dst: bytes, proto: int, payload: bytes) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, 64, proto, 0, src, dst)
    return header[:10] + struct.pack("!H", checksum(header)) + header[12:] + payload


def checksum(data: bytes) -> int:
    """The internet checksum (RFC 1071) of ``data``."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
