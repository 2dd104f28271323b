"""Plumbing for attack.py: an HTTP client that can give up like an impatient phone, the processes under test,
and the provider's counters. Standard library only; loopback only."""
import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.parse
from dataclasses import dataclass, field

HOST = "127.0.0.1"
RETRY_AFTER_CAP = 0.25  # our clients are impatient: they come back sooner than Retry-After asks


@dataclass
class Reply:
    status: int
    headers: dict
    body: object
    raw: bytes = b""  # the body as received: a replay must repeat it byte for byte

    @property
    def outcome(self):
        return self.headers.get("idempotency-outcome")

    @property
    def replayed(self):
        return self.headers.get("idempotent-replayed") == "true"

    @property
    def final(self):
        """An answer a client may keep: anything but "come back later" (409, 502, 503)."""
        return self.status not in (409, 502, 503)

    def retry_after(self):
        return min(float(self.headers.get("retry-after", RETRY_AFTER_CAP)), RETRY_AFTER_CAP)


def request(port, method, path, body=None, headers=None, timeout=5.0):
    """One request on a fresh connection. Raises TimeoutError when the client gives up, and ConnectionError
    (or http.client's subclasses of it) when the server hangs up without an answer."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        payload = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        conn.request(method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        raw = resp.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:  # a server's own error page (a 500 from the framework), not our API's JSON
            parsed = None
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed, raw)
    except socket.timeout as e:  # an alias of TimeoutError only from Python 3.10 on
        raise TimeoutError(str(e)) from None
    finally:
        conn.close()


def pay(port, key, body, timeout=5.0, headers=None):
    hdrs = dict(headers or {})
    if key is not None:
        hdrs["Idempotency-Key"] = key
    return request(port, "POST", "/payments", body, hdrs, timeout)


@dataclass
class Attempts:
    """What one client saw while it retried one payment until it held an answer."""
    replies: list = field(default_factory=list)
    timeouts: int = 0
    dropped: int = 0

    @property
    def last(self):
        return self.replies[-1] if self.replies else None


def pay_until_answered(port, key, body, timeouts=(5.0,), deadline=20.0, log=None):
    """Retries like a real client: the n-th attempt gives up after timeouts[n] (the last value repeats), and a
    "come back later" is honoured (up to RETRY_AFTER_CAP). Bounded by `deadline` seconds."""
    seen = log if log is not None else Attempts()
    end = time.monotonic() + deadline
    attempt = 0
    while time.monotonic() < end:
        timeout = timeouts[min(attempt, len(timeouts) - 1)]
        attempt += 1
        try:
            reply = pay(port, key, body, timeout=timeout)
        except TimeoutError:
            seen.timeouts += 1
            continue
        except (ConnectionError, http.client.HTTPException):
            seen.dropped += 1
            time.sleep(0.05)
            continue
        seen.replies.append(reply)
        if reply.final:
            return seen
        time.sleep(reply.retry_after())
    return seen


class Process:
    """A child process whose pid is also written to a file, so run.sh can clean up even if we are killed."""

    def __init__(self, name, argv, env, workdir):
        self.name, self.argv, self.env, self.workdir = name, argv, env, workdir
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.popen = None

    def start(self, **extra_env):
        log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(self.argv, env={**os.environ, **self.env, **extra_env}, stdout=log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        with open(os.path.join(self.workdir, "pids"), "a") as pids:
            pids.write(f"{self.popen.pid}\n")

    def wait_listening(self, port, timeout=20.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{self.log_tail()}")
            try:
                socket.create_connection((HOST, port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.name} is not listening on {port} after {timeout} s:\n{self.log_tail()}")

    def wait_exit(self, timeout=5.0):
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.popen and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


class Provider:
    """The fake provider's test API (see examples/provider/provider.py)."""

    def __init__(self, port):
        self.port = port

    def stats(self, reference=None, prefix=None):
        query = {"reference": reference} if reference else {"prefix": prefix}
        return request(self.port, "GET", f"/stats?{urllib.parse.urlencode(query)}").body

    def fault(self, reference="*", **spec):
        request(self.port, "POST", "/faults", {"reference": reference, **spec})

    def reset(self):
        request(self.port, "POST", "/faults/reset", {})


def lookup(database_url, scope, key):
    """idem_lookup through psql (the harness has no driver): the outcome, or None for an unknown key."""
    out = subprocess.run(
        ["psql", database_url, "-XqtA", "-v", f"scope={scope}", "-v", f"key={key}"],
        input="SELECT (idem_lookup(:'scope', :'key')).outcome;\n",
        capture_output=True, text=True, timeout=10, check=True)
    return out.stdout.strip() or None
