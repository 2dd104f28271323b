"""A PostgreSQL wire proxy for the HTTP suite: it passes everything through, except that it loses one COMMIT's
answer on purpose. In a connection whose current transaction carried the marker bytes (a request's
`customer_id`, sent in the claim's fingerprint and in the payment insert), the COMMIT goes to the server, the
server commits, and the proxy closes both sides instead of passing the server's answer on. The app then holds a
COMMIT whose outcome it cannot know, which is what a connection lost at that moment, or a client timeout while
COMMIT waits on a synchronous standby, gives it. Standard library only; loopback only.
"""
import socket
import struct
import threading

# Untyped first messages of a connection: the SSL and GSS encryption requests (answered by one byte, then the
# real startup message follows) and a cancel request (the whole connection).
SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104
TRANSACTION_ENDS = {b"commit", b"end", b"commit transaction", b"commit work"}
ROLLBACKS = {b"rollback", b"abort", b"rollback transaction", b"rollback work"}


def _statement(text):
    """A query's text as compared above: lower case, without spaces or a trailing semicolon."""
    return b" ".join(text.rstrip(b"\0").strip().rstrip(b";").strip().lower().split())


class Proxy:
    """Listens on 127.0.0.1:port and relays each connection to the server at upstream_port."""

    def __init__(self, port, upstream_port, marker):
        self.upstream_port, self.marker = upstream_port, marker
        self.dropped = 0  # COMMIT answers lost so far
        self.listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.listener.settimeout(0.2)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.thread.join(2)
        self.listener.close()

    def _accept(self):
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()  # the server is down: the app sees a refused connection, as without the proxy
                continue
            server.settimeout(None)
            client.settimeout(None)
            Relay(self, client, server)


class Relay:
    """One client connection: a thread reads the client's messages and forwards them, another copies the server's
    bytes back until a marked COMMIT was sent, whose answer it drops with both connections."""

    def __init__(self, proxy, client, server):
        self.proxy, self.client, self.server = proxy, client, server
        self.drop_answer = threading.Event()
        self.closed = threading.Lock()
        threading.Thread(target=self._from_client, daemon=True).start()
        threading.Thread(target=self._from_server, daemon=True).start()

    def _close(self):
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _from_server(self):
        try:
            while True:
                data = self.server.recv(65536)
                if not data:
                    break
                if self.drop_answer.is_set():
                    self.proxy.dropped += 1
                    break  # the server answered the COMMIT: that answer is lost with the connection
                self.client.sendall(data)
        except OSError:
            pass
        self._close()

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.client.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _from_client(self):
        try:
            # Untyped messages until the startup message proper.
            while True:
                head = self._read(8)
                length, code = struct.unpack("!ii", head)
                body = self._read(length - 8)
                self.server.sendall(head + body)
                if code not in (SSL_REQUEST, GSSENC_REQUEST):
                    break
            marked = False
            while True:
                head = self._read(5)
                kind, length = head[:1], struct.unpack("!i", head[1:])[0]
                body = self._read(length - 4)
                marked = marked or self.proxy.marker in body
                statement = None
                if kind == b"Q":
                    statement = _statement(body)
                elif kind == b"P":  # Parse: name, then the query, each NUL-terminated
                    statement = _statement(body.split(b"\0")[1])
                if statement in ROLLBACKS:
                    marked = False
                elif marked and statement in TRANSACTION_ENDS:
                    self.drop_answer.set()  # before the COMMIT leaves, so its answer cannot slip through
                self.server.sendall(head + body)
        except (OSError, EOFError, struct.error, IndexError):
            pass
        if not self.drop_answer.is_set():
            self._close()
