#!/usr/bin/env python3
"""Writes the seed corpus of the `http2` fuzz target into Fuzz/corpus/http2/.

Each seed is a control byte (see HTTP2FuzzHarness) followed by the frames a client sends
after the connection preface, which the harness adds itself. Header blocks use HPACK's
static table and literals without Huffman coding, so the fuzzer finds field names and
values as plain bytes. Run from anywhere: python3 Fuzz/Support/http2-seeds.py
"""
import os
import struct

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def integer(value, prefix_bits, first=0):
    """An HPACK integer (RFC 7541 §5.1) whose prefix shares its first byte with `first`."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out, value = [first | limit], value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes(out + [value])


def literal(name, value):
    """A literal field without indexing; `name` is a static table index or a new name."""
    value = value.encode()
    if isinstance(name, int):
        return integer(name, 4) + integer(len(value), 7) + value
    name = name.encode()
    return b"\x00" + integer(len(name), 7) + name + integer(len(value), 7) + value


def request(method_index, path, extra=()):
    """:method from the static table (0x82 GET, 0x83 POST), :scheme https, :path, :authority."""
    block = bytes([method_index, 0x87]) + literal(4, path) + literal(1, "api.example")
    for name, value in extra:
        block += literal(name, value)
    return block


def settings(*pairs):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", key, value) for key, value in pairs))


CLIENT_START = settings((0x2, 0), (0x4, 65535)) + frame(SETTINGS, ACK, 0)


def window_update(stream, increment):
    return frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", increment))


SEEDS = {
    # A GET answered whole at its head.
    "get": (0x00, CLIENT_START + frame(HEADERS, END_HEADERS | END_STREAM, 1, request(0x82, "/0"))),
    # A HEAD, the same answer without its body.
    "head": (
        0x00,
        CLIENT_START
        + frame(HEADERS, END_HEADERS | END_STREAM, 1, bytes([0x02, 4]) + b"HEAD" + request(0x82, "/0")[1:]),
    ),
    # A POST whose body comes in two DATA frames (one padded) and is echoed back.
    "post-data": (
        0x00,
        CLIENT_START
        + frame(HEADERS, END_HEADERS, 1, request(0x83, "/2", [(28, "11"), ("content-type", "text/plain")]))
        + frame(DATA, 0, 1, b"hello")
        + frame(DATA, PADDED | END_STREAM, 1, b"\x03" + b" world" + b"\x00\x00\x00"),
    ),
    # A POST without content-length, read in pieces of 9 bytes, with trailers; its responder
    # pauses reading for a while.
    "post-trailers": (
        0x02,
        CLIENT_START
        + frame(HEADERS, END_HEADERS, 1, request(0x83, "/5"))
        + frame(DATA, 0, 1, b"x" * 300)
        + frame(HEADERS, END_HEADERS | END_STREAM, 1, literal("x-checksum", "abc")),
    ),
    # Several streams at once, one of each kind of answer, answers chosen by path.
    "streams": (
        0x00,
        CLIENT_START
        + b"".join(
            frame(HEADERS, END_HEADERS | END_STREAM, 2 * n + 1, request(0x82, "/%d" % n)) for n in range(10)
        )
        + window_update(0, 1 << 20)
        + b"".join(window_update(2 * n + 1, 1 << 20) for n in range(10)),
    ),
    # The same streams with answers chosen by stream id, torn down by the deadlines.
    "streams-deadlines": (
        0xB0,
        CLIENT_START
        + b"".join(
            frame(HEADERS, END_HEADERS | (END_STREAM if n % 2 else 0), 2 * n + 1, request(0x83, "/x"))
            for n in range(10)
        ),
    ),
    # Control frames: SETTINGS (and its ACK), PING, PRIORITY, WINDOW_UPDATE, then GOAWAY.
    "control": (
        0x10,
        settings((0x1, 4096), (0x3, 100), (0x4, 1 << 20), (0x5, 16384), (0x6, 8192))
        + frame(PING, 0, 0, b"pingpong")
        + frame(PING, ACK, 0, b"pingpong")
        + frame(PRIORITY, 0, 3, struct.pack(">IB", 0, 15))
        + window_update(0, 100000)
        + frame(SETTINGS, ACK, 0)
        + frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, 5, struct.pack(">IB", 3, 200) + request(0x82, "/1"))
        + frame(GOAWAY, 0, 0, struct.pack(">II", 5, 0)),
    ),
    # A header block in HEADERS plus two CONTINUATION frames.
    "continuation": (
        0x20,
        CLIENT_START
        + frame(HEADERS, END_STREAM, 1, request(0x82, "/8")[:6])
        + frame(CONTINUATION, 0, 1, request(0x82, "/8")[6:] + literal("x-one", "a" * 40))
        + frame(CONTINUATION, END_HEADERS, 1, literal("cookie", "a=1") + literal("cookie", "b=2")),
    ),
    # Streams reset by the client: one before its body ended, one right after its head.
    "rst-stream": (
        0x00,
        CLIENT_START
        + frame(HEADERS, END_HEADERS, 1, request(0x83, "/2"))
        + frame(DATA, 0, 1, b"part")
        + frame(RST_STREAM, 0, 1, struct.pack(">I", 8))
        + frame(HEADERS, END_HEADERS | END_STREAM, 3, request(0x82, "/7"))
        + frame(RST_STREAM, 0, 3, struct.pack(">I", 8)),
    ),
    # A request the HTTP/1.1 rules refuse (Host disagrees with :authority), and one with a
    # dot segment, under tight limits.
    "refused": (
        0x08,
        CLIENT_START
        + frame(HEADERS, END_HEADERS | END_STREAM, 1, request(0x82, "/0", [("host", "other.example")]))
        + frame(HEADERS, END_HEADERS | END_STREAM, 3, request(0x82, "/a/../0")),
    ),
    # A large answer the client's window holds back, then opens in steps.
    "large-window": (
        0x40,
        CLIENT_START
        + frame(HEADERS, END_HEADERS | END_STREAM, 1, request(0x82, "/6"))
        + window_update(1, 30000)
        + window_update(0, 30000)
        + window_update(1, 200000)
        + window_update(0, 200000),
    ),
    # No preface: what the server does with HTTP/1.1 bytes.
    "no-preface": (0x01, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
}


def main():
    directory = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus", "http2")
    os.makedirs(directory, exist_ok=True)
    for name, (control, body) in SEEDS.items():
        with open(os.path.join(directory, name), "wb") as seed:
            seed.write(bytes([control]) + body)


if __name__ == "__main__":
    main()
