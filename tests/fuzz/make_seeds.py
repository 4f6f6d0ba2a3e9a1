#!/usr/bin/python3
"""Writes the seed corpus (corpus/<target>/): a few well-formed inputs per parser, each named after
what it is, from which libFuzzer mutates. Run again after changing a wire format."""
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
READ, WRITE = 4, 2  # IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE


def write(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame(ftype, payload=b"", credits=3, request_id=0):
    return struct.pack(">BBHIQ", 1, ftype, credits, len(payload), request_id) + payload


region = struct.pack(">QQII", 0x7f0000001000, 65536, 0x1234, READ | WRITE)
frames = {
    "data": frame(0, b"hello, evrdma"),
    "data-empty": frame(0),
    "region-request": frame(1, struct.pack(">QI", 4096, WRITE), request_id=1),
    "region-grant": frame(2, region, request_id=1),
    "region-refused": frame(3, struct.pack(">I", 12), request_id=1),
    "region-offer": frame(4, region + struct.pack(">Q", 7)),
    "region-release": frame(5, struct.pack(">IQ", 0x1234, 0x7f0000001000)),
    "credit": frame(6, credits=15),
    "hello": frame(7, struct.pack(">Q", 65536), credits=7),
    "keepalive-probe": frame(8),
    "keepalive-reply": frame(9),
}
for name, data in frames.items():
    write("frame", name, data)

# region_exchange scripts: a step byte (its value mod 8 picks the step), then its fields.
write("region_exchange", "peer-requests-then-releases",
      bytes([1, 0, 0, 64, 3]) + bytes([5, 0]))
write("region_exchange", "we-request-peer-grants",
      bytes([6, 0, 64, 3, 1]) + bytes([2, 1]) + struct.pack(">Q", 0x1000) + bytes([1, 63, 9, 3]))
write("region_exchange", "peer-offers-we-release",
      bytes([4]) + struct.pack(">Q", 0x2000) + bytes([1, 99, 5, 1, 7]) + bytes([7, 0]))
write("region_exchange", "raw-request-frame", bytes([0, len(frames["region-request"])]) + frames["region-request"])

reason = b"server busy: 64 agents (maxAgents)"
write("reject_reason", "reason", b"EVRJ" + bytes([len(reason)]) + reason)
write("reject_reason", "reason-padded", (b"EVRJ" + bytes([len(reason)]) + reason).ljust(148, b"\0"))
write("reject_reason", "empty-reason", b"EVRJ\0")

write("pingsr_request", "count-and-size", struct.pack(">QQ", 1000, 4096))
write("pingsr_request", "roce-padded", struct.pack(">QQ", 10, 64).ljust(56, b"\0"))

for mode, name in enumerate(["send", "write", "write_imm", "read"]):
    write("blast_request", name, b"EVBL" + struct.pack(">BBHIIQ", 1, mode, 1, 8, 65536, 10000))
write("blast_request", "send-roce-padded", (b"EVBL" + struct.pack(">BBHIIQ", 1, 0, 0, 8, 64, 5)).ljust(56, b"\0"))

# ofa_blast: a byte (odd: an ack for the client, even: a request for the server), a u64 of
# messages unacknowledged, then the bytes.
write("ofa_blast", "request", bytes([0]) + struct.pack(">Q", 0) + struct.pack(">QQQ", 2000, 4096, 9))
write("ofa_blast", "request-roce-padded", bytes([0]) + struct.pack(">Q", 0) + struct.pack(">QQQ", 1, 1, 1).ljust(56, b"\0"))
write("ofa_blast", "ack", bytes([1]) + struct.pack(">Q", 9) + struct.pack(">Q", 3))
