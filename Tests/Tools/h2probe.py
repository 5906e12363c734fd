#!/usr/bin/python3
"""An HTTP/2 client for the gateway's tests: well-behaved requests, and the abuses the
gateway must end a connection for, written frame by frame (Python `h2`, Debian python3-h2).

Usage: h2probe.py PORT MODE [JSON]   (cleartext, prior knowledge; --tls for TLS with ALPN h2)
Prints one JSON object on stdout with what happened. Every wait is bounded.
"""
import json
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame, PingFrame, PriorityFrame, \
    SettingsFrame, WindowUpdateFrame

DEADLINE_S = 20


def connect(port, tls, window=None):
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2", "http/1.1"])
        sock = context.wrap_socket(sock, server_hostname="localhost")
        if sock.selected_alpn_protocol() != "h2":
            raise SystemExit(json.dumps({"error": "alpn", "alpn": sock.selected_alpn_protocol()}))
    # Outbound checks off: some tests send what a broken or hostile client would.
    config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8", validate_inbound_headers=False,
                                       validate_outbound_headers=False, normalize_outbound_headers=False)
    conn = h2.connection.H2Connection(config=config)
    conn.initiate_connection()
    if window is not None:
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
    sock.sendall(conn.data_to_send())
    return sock, conn


class Streams:
    """Answers gathered per stream."""

    def __init__(self):
        self.status = {}
        self.headers = {}
        self.body = {}
        self.ended = set()
        self.reset = {}
        self.goaway = None

    def handle(self, conn, events, consume=True):
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                self.status[event.stream_id] = int(headers.get(":status", "0"))
                self.headers[event.stream_id] = {k: v for k, v in event.headers if not k.startswith(":")}
            elif isinstance(event, h2.events.DataReceived):
                self.body.setdefault(event.stream_id, bytearray()).extend(event.data)
                if consume:
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.ended.add(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self.reset[event.stream_id] = int(event.error_code)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = int(event.error_code)

    def report(self, streams):
        out = []
        for sid in streams:
            body = bytes(self.body.get(sid, b""))
            out.append({
                "stream": sid, "status": self.status.get(sid), "headers": self.headers.get(sid, {}),
                "ended": sid in self.ended, "reset": self.reset.get(sid), "length": len(body),
                "body": body.decode("utf-8", "replace") if len(body) <= 4096 else None,
                "sum": sum(body) % 65521,
            })
        return out


def pump(sock, conn, streams, until, consume=True, limit=DEADLINE_S):
    """Reads and answers frames until `until()` or the connection ends or the time is up."""
    end = time.time() + limit
    sock.settimeout(0.2)
    while time.time() < end and not until():
        try:
            data = sock.recv(65536)
        except socket.timeout:
            data = None
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return "reset"
        if data == b"":
            return "closed"
        if data:
            try:
                events = conn.receive_data(data)
            except Exception as error:  # the gateway broke the protocol: a test failure
                return "protocol-error: %s" % error
            streams.handle(conn, events, consume)
        out = conn.data_to_send()
        if out:
            try:
                sock.sendall(out)
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                return "reset"
    return "done" if until() else "timeout"


def request_headers(port, req):
    headers = [(":method", req.get("method", "GET")), (":scheme", "http"),
               (":authority", req.get("authority", "127.0.0.1:%d" % port)), (":path", req["path"])]
    headers += [tuple(h) for h in req.get("headers", [])]
    return headers


def mode_requests(port, tls, spec):
    """Sends every request of spec["requests"] at once on one connection (bodies as DATA,
    trailers if asked), reads every answer. With spec["one_at_a_time"], each request is sent
    once the answer before it has ended: the connection's streams follow one another."""
    sock, conn = connect(port, tls)
    streams = Streams()
    batches = [[req] for req in spec["requests"]] if spec.get("one_at_a_time") else [spec["requests"]]
    wanted = []
    outcome = None
    for batch in batches:
        outcome, ids = send_and_read(port, sock, conn, streams, batch)
        wanted += ids
        if outcome != "done":
            break
    sock.close()
    return {"outcome": outcome, "goaway": streams.goaway, "streams": streams.report(wanted)}


def send_and_read(port, sock, conn, streams, requests):
    """Sends `requests` at once and reads until each one's answer has ended or was reset;
    the outcome and the stream ids."""
    ids = []
    for req in requests:
        sid = conn.get_next_available_stream_id()
        body = req.get("body")
        if body is None and "body_bytes" in req:
            body = bytes(i % 251 for i in range(req["body_bytes"]))
        elif body is not None:
            body = body.encode()
        trailers = req.get("trailers")
        conn.send_headers(sid, request_headers(port, req), end_stream=body is None and not trailers)
        ids.append((sid, body, trailers))
        sock.sendall(conn.data_to_send())
    pending = {sid: (body or b"", trailers) for sid, body, trailers in ids if body is not None or trailers}

    def send_bodies():
        for sid in list(pending):
            body, trailers = pending[sid]
            while body:
                window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                if window <= 0:
                    break
                chunk, body = body[:window], body[window:]
                conn.send_data(sid, chunk, end_stream=not body and not trailers)
            if body:
                pending[sid] = (body, trailers)
                continue
            if trailers:
                conn.send_headers(sid, [tuple(t) for t in trailers], end_stream=True)
            del pending[sid]
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
        return not pending

    wanted = [sid for sid, _, _ in ids]
    end = time.time() + DEADLINE_S
    outcome = None
    while time.time() < end:
        send_bodies()
        outcome = pump(sock, conn, streams,
                       lambda: all(s in streams.ended or s in streams.reset for s in wanted), limit=0.3)
        if all(s in streams.ended or s in streams.reset for s in wanted):
            outcome = "done"
            break
        if outcome in ("closed", "reset") or (outcome and outcome.startswith("protocol-error")):
            break
    return outcome, wanted


def mode_cancel(port, tls, spec):
    """Opens a stream and resets it: at once ("phase": "sent"), after the answer's head
    ("head"), or after some of the body ("body"). Then a second request must still work."""
    sock, conn = connect(port, tls)
    streams = Streams()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, request_headers(port, spec), end_stream="body_bytes" not in spec)
    if "body_bytes" in spec:
        conn.send_data(sid, bytes(spec["body_bytes"]), end_stream=False)
    sock.sendall(conn.data_to_send())
    phase = spec.get("phase", "sent")
    if phase == "head":
        pump(sock, conn, streams, lambda: sid in streams.status, limit=10)
    elif phase == "body":
        pump(sock, conn, streams, lambda: len(streams.body.get(sid, b"")) > 0, limit=10)
    elif phase == "wait":
        time.sleep(spec.get("wait_s", 0.5))
    conn.reset_stream(sid, error_code=8)
    sock.sendall(conn.data_to_send())
    follow = conn.get_next_available_stream_id()
    conn.send_headers(follow, request_headers(port, {"path": spec.get("then", "/after")}), end_stream=True)
    sock.sendall(conn.data_to_send())
    outcome = pump(sock, conn, streams, lambda: follow in streams.ended or follow in streams.reset)
    sock.close()
    return {"outcome": outcome, "goaway": streams.goaway, "cancelled_status": streams.status.get(sid),
            "streams": streams.report([follow])}


def mode_slow_reader(port, tls, spec):
    """A stream whose answer the client never acknowledges (its window stays shut), and
    other streams on the same connection that must still finish."""
    sock, conn = connect(port, tls, window=spec.get("window", 65535))
    # As browsers do: a big window for the whole connection, one stream's for each stream; a
    # stream nobody reads then holds only its own.
    conn.increment_flow_control_window(16 << 20)
    streams = Streams()
    slow = conn.get_next_available_stream_id()
    conn.send_headers(slow, request_headers(port, {"path": spec["slow"]}), end_stream=True)
    sock.sendall(conn.data_to_send())
    # Read the slow stream's first window without acknowledging it.
    pump(sock, conn, streams, lambda: len(streams.body.get(slow, b"")) >= spec.get("window", 65535),
         consume=False, limit=10)
    fast = []
    for path in spec["fast"]:
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, request_headers(port, {"path": path}), end_stream=True)
        fast.append(sid)
    sock.sendall(conn.data_to_send())

    # The fast streams' data is acknowledged; the slow one's never is.
    def done():
        return all(s in streams.ended or s in streams.reset for s in fast)

    end = time.time() + DEADLINE_S
    outcome = None
    while time.time() < end and not done():
        sock.settimeout(0.2)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        if not data:
            outcome = "closed"
            break
        for event in conn.receive_data(data):
            streams.handle(conn, [event], consume=not (isinstance(event, h2.events.DataReceived)
                                                       and event.stream_id == slow))
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
    sock.close()
    return {"outcome": outcome or ("done" if done() else "timeout"), "goaway": streams.goaway,
            "slow_bytes": len(streams.body.get(slow, b"")), "streams": streams.report(fast)}


def raw_connect(port, tls):
    sock, conn = connect(port, tls)
    return sock


def raw_goaway(sock, limit=10):
    """Reads until a GOAWAY frame or the end; returns its error code (or None) and whether
    the connection then closed."""
    end = time.time() + limit
    sock.settimeout(0.3)
    buffer = b""
    code = None
    while time.time() < end:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            if code is not None:
                return code, False
            continue
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return code, True
        if not data:
            return code, True
        buffer += data
        while len(buffer) >= 9:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + length:
                break
            kind = buffer[3]
            payload = buffer[9:9 + length]
            buffer = buffer[9 + length:]
            if kind == 7 and len(payload) >= 8:
                code = int.from_bytes(payload[4:8], "big")
    return code, False


def encoder():
    from hpack import Encoder
    return Encoder()


def mode_abuse(port, tls, spec):
    """Writes one kind of abuse frame by frame, then reads the gateway's GOAWAY."""
    kind = spec["kind"]
    count = spec.get("count", 1000)
    sock = raw_connect(port, tls)
    frames = []
    hp = encoder()
    base = [(":method", "GET"), (":scheme", "http"), (":authority", "127.0.0.1"), (":path", "/x")]
    try:
        if kind == "ping":
            frames = [PingFrame(0, opaque_data=i.to_bytes(8, "big")) for i in range(count)]
        elif kind == "settings":
            frames = [SettingsFrame(0, settings={4: 65535}) for _ in range(count)]
        elif kind == "priority":
            frames = [PriorityFrame(1 + 2 * (i % 1000), depends_on=0, stream_weight=15) for i in range(count)]
        elif kind == "empty-data":
            frames = [HeadersFrame(1, hp.encode([(":method", "POST")] + base[1:]), flags=["END_HEADERS"])]
            frames += [DataFrame(1, b"") for _ in range(count)]
        elif kind == "window-update":
            frames = [WindowUpdateFrame(0, window_increment=1) for _ in range(count)]
        elif kind == "rapid-reset":
            from hyperframe.frame import RstStreamFrame
            for i in range(count):
                sid = 1 + 2 * i
                frames.append(HeadersFrame(sid, hp.encode(base), flags=["END_HEADERS", "END_STREAM"]))
                frames.append(RstStreamFrame(sid, error_code=8))
        elif kind == "continuation":
            block = hp.encode(base + [("x-filler", "a" * 100)])
            frames = [HeadersFrame(1, block[:10], flags=["END_STREAM"])]
            frames += [ContinuationFrame(1, b"") for _ in range(count)]
        elif kind == "header-list":
            big = [("x-big-%d" % i, "v" * 1000) for i in range(spec.get("fields", 40))]
            block = hp.encode(base + big)
            frames = [HeadersFrame(1, block[:16000], flags=["END_STREAM"] + (["END_HEADERS"] if len(block) <= 16000 else []))]
            rest = block[16000:]
            while rest:
                piece, rest = rest[:16000], rest[16000:]
                frames.append(ContinuationFrame(1, piece, flags=[] if rest else ["END_HEADERS"]))
        elif kind == "streams":
            # Streams whose bodies never come stay open: past the limit they are refused.
            post = [(":method", "POST")] + base[1:]
            for i in range(count):
                frames.append(HeadersFrame(1 + 2 * i, hp.encode(post), flags=["END_HEADERS"]))
        elif kind == "idle":
            frames = []  # the preface and SETTINGS only, then silence
        elif kind == "window-shut":
            # Asks for a big answer and never acknowledges a byte of it: the stream's window
            # and the connection's both stay shut once the first 65,535 bytes are in.
            frames = [HeadersFrame(1, hp.encode(base[:3] + [(":path", spec.get("path", "/x"))]),
                                   flags=["END_HEADERS", "END_STREAM"])]
        else:
            raise SystemExit(json.dumps({"error": "unknown kind " + kind}))
        payload = b"".join(f.serialize() for f in frames)
        sock.settimeout(10)
        try:
            sock.sendall(payload)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            pass
        code, closed = raw_goaway(sock, limit=spec.get("wait_s", 10))
    finally:
        sock.close()
    return {"goaway": code, "closed": closed}


def main():
    args = sys.argv[1:]
    tls = "--tls" in args
    args = [a for a in args if a != "--tls"]
    port, mode = int(args[0]), args[1]
    spec = json.loads(args[2]) if len(args) > 2 else {}
    handler = {"requests": mode_requests, "cancel": mode_cancel, "slow-reader": mode_slow_reader,
               "abuse": mode_abuse}[mode]
    print(json.dumps(handler(port, tls, spec)))


if __name__ == "__main__":
    main()
