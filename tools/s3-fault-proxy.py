#!/usr/bin/env python3
"""A loopback HTTP fault proxy between an S3 client and an S3 server, for ckpt's fault tests
(spec/OBJECT.md 6). Python standard library only.

  s3-fault-proxy.py --upstream http://127.0.0.1:9000 [--port 0] [--control-port 0]

Prints one line "s3-fault-proxy: listening <proxy-url> control <control-url>" on stdout when ready, then
serves until SIGINT/SIGTERM. Every request is forwarded unchanged: the same method, target and headers
in the same order (Host and Authorization as the client signed them; SigV4 covers Host, so the
upstream sees the proxy's host:port as signed), except the hop-by-hop ones (Expect, which the proxy
answers itself, Transfer-Encoding: a chunked body is forwarded with its Content-Length, and Connection).
Keep-alive on both sides.

Faults come from rules, set through the control API between a test's operations:

  PUT    /rules     JSON list of rules (replaces them all); GET /rules shows them with their counters
  DELETE /rules     no rules: forward everything
  GET    /log       the request log, one line per request: seq TAB method TAB path TAB query TAB status TAB action
                    (status 0 where no status reached the client); ?json=1 for a JSON list
  DELETE /log       clears the log: a request that arrived before it is not recorded, however late it ends
  POST   /release   releases every hung request (its connection is closed without an answer)

A rule is an object:

  {"method": "PUT",                 optional: the request's method
   "query": ["uploadId", "partNumber"],  optional: parameters that must all be present
   "no_query": true,                optional: the request has no query string at all
   "path": "regex",                 optional: re.search on the decoded path (/bucket/key)
   "skip": 0,                       matching requests to let through before the rule fires
   "times": 1,                      how many times it fires (null: every matching request after skip)
   "action": "slowdown" | "reset" | "error200" | "lose_response" | "hang" | "pass" | "kill" | "kill_after"
             | "rewrite",
   "forward": true,                 error200 only: forward first (the server acts) or not (default true)
   "pattern": "regex",              rewrite only (required): re.sub on the server's answer body (UTF-8)
   "replacement": "text",           rewrite only: what replaces each match (backreferences as in re.sub)
   "reset_after": 65536,            reset only: body bytes read before the connection is reset
   "pid": 1234,                     kill and kill_after only (required): the process to signal
   "signal": 9}                     kill and kill_after only: the signal (default SIGKILL)

The first rule whose match and counters fit decides; a request no rule takes is forwarded.

  slowdown       503 with an S3 <Error><Code>SlowDown</Code> body, nothing forwarded
  reset          reads up to reset_after bytes of the body, then closes with SO_LINGER 0 (an RST)
  error200       (forwards, then) answers 200 with an <Error><Code>InternalError</Code> body
  lose_response  forwards, lets the server act, then closes the connection without an answer (RST)
  hang           forwards nothing and answers nothing until POST /release (or 60 s), then closes
  pass           forwards (counts as a match, e.g. to skip a rule further down)
  kill           signals pid (the client itself: a writer killed at this request boundary) as soon as the
                 request's head arrives, before anything is forwarded, then closes the connection (RST)
  kill_after     forwards, lets the server act and reads its whole answer, then signals pid and closes the
                 connection without the answer (RST): the writer dies with its request done and the answer lost
  rewrite        forwards, then answers with the server's status and headers and its body rewritten: another
                 server's dialect (a renamed element), or a field changed on the way (a checksum)

Counters start when the rules are set, so {"action": "kill", "pid": P, "skip": N - 1} kills P at the N-th request
after PUT /rules, whatever it is (tests/test_s3_crash.py). The signal is sent before the connection is closed,
so the client never sees the fault; what the killed process had in flight on other connections still goes
through (a real crash does the same). The log's action names the rule that fired; its status is 0 for kill and
minus the server's status for kill_after.
"""
import argparse
import http.client
import io
import json
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ACTIONS = {"slowdown", "reset", "error200", "lose_response", "hang", "pass", "kill", "kill_after", "rewrite"}
HOP_BY_HOP = {"expect", "transfer-encoding", "connection", "keep-alive", "proxy-connection", "te", "upgrade"}
HANG_LIMIT_S = 60.0


def s3_error(code, message):
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f'<RequestId>ckpt-fault-proxy</RequestId></Error>').encode()


class State:
    def __init__(self, upstream):
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"--upstream must be http://host:port, not {upstream!r}")
        self.upstream_host = parsed.hostname
        self.upstream_port = parsed.port or 80
        self.lock = threading.Lock()
        self.rules = []
        self.log = []
        self.seq = 0
        self.cleared_through = 0  # DELETE /log: requests that arrived before it stay out, however late they end
        self.release = threading.Event()

    def set_rules(self, rules):
        checked = []
        for rule in rules:
            if not isinstance(rule, dict) or rule.get("action") not in ACTIONS:
                raise ValueError(f"a rule needs an action in {sorted(ACTIONS)}: {rule!r}")
            if "path" in rule:
                re.compile(rule["path"])
            if rule["action"] in ("kill", "kill_after"):
                pid = rule.get("pid")
                if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
                    raise ValueError(f"a kill rule needs the pid of the process to kill (an integer > 1): {rule!r}")
                if not isinstance(rule.get("signal", signal.SIGKILL), int):
                    raise ValueError(f"a kill rule's signal is a number: {rule!r}")
            if rule["action"] == "rewrite":
                if not isinstance(rule.get("pattern"), str) or not isinstance(rule.get("replacement", ""), str):
                    raise ValueError(f"a rewrite rule needs a pattern (and a replacement) as strings: {rule!r}")
                re.compile(rule["pattern"])
            rule = dict(rule)
            rule.setdefault("skip", 0)
            rule.setdefault("times", 1)
            rule["matched"] = 0
            rule["fired"] = 0
            checked.append(rule)
        with self.lock:
            self.rules = checked
            self.release.clear()

    def decide(self, method, path, query):
        """The rule that takes this request (its counters advanced), or None."""
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        with self.lock:
            self.seq += 1
            seq = self.seq
            for rule in self.rules:
                if "method" in rule and rule["method"] != method:
                    continue
                if any(name not in params for name in rule.get("query", [])):
                    continue
                if rule.get("no_query") and query:
                    continue
                if "path" in rule and not re.search(rule["path"], urllib.parse.unquote(path)):
                    continue
                times = rule["times"]
                if times is not None and rule["fired"] >= times:
                    continue
                rule["matched"] += 1
                if rule["matched"] <= rule["skip"]:
                    continue
                rule["fired"] += 1
                return seq, dict(rule)
        return seq, None

    def record(self, seq, method, path, query, status, action):
        with self.lock:
            if seq <= self.cleared_through:
                return  # answered before the log was cleared, recorded after (the answer is sent first)
            self.log.append({"seq": seq, "method": method, "path": path, "query": query, "status": status,
                             "action": action, "time": time.time()})


def kill(rule):
    """Sends the rule's signal to its pid (kill, kill_after); a process already gone is no error."""
    try:
        os.kill(rule["pid"], int(rule.get("signal", signal.SIGKILL)))
    except ProcessLookupError:
        pass


class Dropped(Exception):
    """The client connection was closed on purpose (reset, lose_response, hang, kill, kill_after)."""


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as curl expects
    server_version = "ckpt-s3-fault-proxy"
    upstream = None

    def log_message(self, format, *args):  # quiet: the request log is the record
        pass

    def handle_expect_100(self):
        # Decided in do_any: the rule may refuse before the body comes.
        return True

    # --- helpers ---------------------------------------------------------------------------------

    def abort_connection(self):
        """Closes the client connection with an RST (SO_LINGER 0), at once."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        for f in (self.rfile, self.wfile):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.connection.close()
        except OSError:
            pass
        # The handler flushes and closes these after the request: harmless stand-ins.
        self.rfile, self.wfile = io.BytesIO(), io.BytesIO()
        self.close_connection = True
        raise Dropped()

    def send_continue(self):
        if self.headers.get("Expect", "").lower() == "100-continue" and self.request_version != "HTTP/1.0":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()

    def read_body(self, limit=None):
        """The request body (Content-Length or chunked); at most limit bytes when given."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                if limit is not None and total + size > limit:
                    chunks.append(self.rfile.read(limit - total))
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                total += size
                self.rfile.readline(3)
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length", "0") or 0)
        if limit is not None:
            length = min(length, limit)
        data, left = [], length
        while left > 0:
            piece = self.rfile.read(min(left, 1 << 20))
            if not piece:
                break
            data.append(piece)
            left -= len(piece)
        return b"".join(data)

    def forward(self, body):
        """Sends the request upstream; returns (status, reason, headers, body)."""
        state = self.server.state
        for attempt in (0, 1):
            fresh = self.upstream is None
            if fresh:
                self.upstream = http.client.HTTPConnection(state.upstream_host, state.upstream_port, timeout=120)
            try:
                conn = self.upstream
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() in HOP_BY_HOP or name.lower() == "content-length":
                        continue
                    conn.putheader(name, value)
                if body or self.command in ("PUT", "POST") or "Content-Length" in self.headers:
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body if body else None)
                response = conn.getresponse()
                data = response.read()  # b"" for HEAD; always read, or the connection takes no next request
                headers = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
                if response.will_close:
                    conn.close()
                    self.upstream = None
                return response.status, response.reason, headers, data
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                # Nothing was answered: safe to resend only on a connection we reused.
                # A kept-alive upstream connection the server closed meanwhile: once more on a fresh one.
                self.upstream.close()
                self.upstream = None
                if fresh or attempt == 1:
                    raise exc
        raise AssertionError("unreachable")

    def answer(self, status, reason, headers, body):
        self.send_response_only(status, reason)
        has_length = False
        for name, value in headers:
            if name.lower() == "content-length":
                if self.command == "HEAD":
                    has_length = True
                    self.send_header(name, value)
                continue
            self.send_header(name, value)
        if not has_length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self.wfile.flush()

    # --- the request -----------------------------------------------------------------------------

    def do_any(self):
        state = self.server.state
        split = urllib.parse.urlsplit(self.path)
        path, query = split.path, split.query
        seq, rule = state.decide(self.command, path, query)
        action = rule["action"] if rule else "forward"
        status = 0
        recorded = False

        def reply(code, reason, headers, data):
            # Recorded before it is sent: a client that has the answer finds it in the log (the test reads
            # the log as soon as its save returns).
            nonlocal status, recorded
            status, recorded = code, True
            state.record(seq, self.command, path, query, status, action)
            self.answer(code, reason, headers, data)

        try:
            if action == "slowdown":
                # After "Expect: 100-continue" refused before the body, as S3 does (the body never comes, so
                # the connection closes); otherwise the body is read first and the connection kept.
                body = s3_error("SlowDown", "Please reduce your request rate. (ckpt fault proxy)")
                headers = [("Content-Type", "application/xml")]
                if self.headers.get("Expect", "").lower() == "100-continue":
                    self.close_connection = True
                    headers.append(("Connection", "close"))
                else:
                    self.read_body()
                reply(503, "Slow Down", headers, body)
                return
            if action == "hang":
                state.release.wait(HANG_LIMIT_S)
                self.abort_connection()
            if action == "kill":
                kill(rule)
                self.abort_connection()
            self.send_continue()
            if action == "reset":
                self.read_body(int(rule.get("reset_after", 65536)))
                self.abort_connection()
            body = self.read_body()
            if action == "error200" and not rule.get("forward", True):
                reply(200, "OK", [("Content-Type", "application/xml")],
                            s3_error("InternalError", "We encountered an internal error. Please try again. (ckpt fault proxy)"))
                return
            try:
                up_status, reason, headers, data = self.forward(body)
            except (OSError, http.client.HTTPException) as exc:
                self.close_connection = True
                reply(502, "Bad Gateway", [("Content-Type", "application/xml"), ("Connection", "close")],
                            s3_error("ServiceUnavailable", f"the fault proxy could not reach the server: {exc}"))
                return
            if action in ("lose_response", "kill_after"):
                status = -up_status  # what the server answered, never delivered
                if action == "kill_after":
                    kill(rule)
                self.abort_connection()
            if action == "error200":
                reply(200, "OK", [("Content-Type", "application/xml")],
                            s3_error("InternalError", "We encountered an internal error. Please try again. (ckpt fault proxy)"))
                return
            if action == "rewrite":
                data = re.sub(rule["pattern"], rule.get("replacement", ""), data.decode("utf-8")).encode("utf-8")
            reply(up_status, reason, headers, data)
        except Dropped:
            pass
        except (ConnectionError, BrokenPipeError, socket.timeout, ValueError):
            self.close_connection = True
        finally:
            if not recorded:
                state.record(seq, self.command, path, query, status, action)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_any

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        if self.upstream is not None:
            self.upstream.close()


class ControlHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def reply(self, code, body, content_type="text/plain"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        return self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))

    def do_GET(self):
        state = self.server.state
        split = urllib.parse.urlsplit(self.path)
        with state.lock:
            if split.path == "/rules":
                return self.reply(200, json.dumps(state.rules, indent=1), "application/json")
            if split.path == "/log":
                entries = list(state.log)
            else:
                return self.reply(404, "no such control resource\n")
        if "json=1" in split.query:
            return self.reply(200, json.dumps(entries), "application/json")
        lines = "".join(f"{e['seq']}\t{e['method']}\t{e['path']}\t{e['query']}\t{e['status']}\t{e['action']}\n"
                        for e in entries)
        return self.reply(200, lines)

    def do_PUT(self):
        state = self.server.state
        if self.path != "/rules":
            return self.reply(404, "no such control resource\n")
        try:
            rules = json.loads(self.body() or b"[]")
            if isinstance(rules, dict):
                rules = [rules]
            state.set_rules(rules)
        except (ValueError, re.error) as exc:
            return self.reply(400, f"bad rules: {exc}\n")
        return self.reply(200, "ok\n")

    def do_POST(self):
        if self.path == "/release":
            self.body()
            self.server.state.release.set()
            return self.reply(200, "ok\n")
        return self.do_PUT()

    def do_DELETE(self):
        state = self.server.state
        if self.path == "/rules":
            state.set_rules([])
        elif self.path == "/log":
            with state.lock:
                state.log.clear()
                state.cleared_through = state.seq
        else:
            return self.reply(404, "no such control resource\n")
        return self.reply(200, "ok\n")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def start(upstream, host="127.0.0.1", port=0, control_port=0):
    """Starts proxy and control servers on threads; returns (state, proxy_server, control_server)."""
    state = State(upstream)
    proxy = Server((host, port), ProxyHandler)
    control = Server((host, control_port), ControlHandler)
    proxy.state = control.state = state
    for s in (proxy, control):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    return state, proxy, control


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="the S3 server, http://host:port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="the proxy's port (0: a free one)")
    parser.add_argument("--control-port", type=int, default=0, help="the control API's port (0: a free one)")
    args = parser.parse_args()
    try:
        _, proxy, control = start(args.upstream, args.host, args.port, args.control_port)
    except (ValueError, OSError) as exc:
        print(f"s3-fault-proxy: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"s3-fault-proxy: listening http://{args.host}:{proxy.server_address[1]} "
          f"control http://{args.host}:{control.server_address[1]}", flush=True)
    while not stop.wait(3600):
        pass
    proxy.shutdown()
    control.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
