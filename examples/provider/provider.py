#!/usr/bin/env python3
"""A fake payment provider shared by the three example services and the e2e harness. Standard library only.

Like a real card processor it is idempotent by reference: a second charge with the same reference returns the
first charge and charges nothing. It also counts what a provider without that safety net would have done, so
the harness can prove the services never lean on it: `calls` is how many charge requests it accepted for a
reference, and a reference with more than one call would have been charged twice.

    POST /charges          {"reference", "amount", "currency", "customer_id"}
                           201 new charge | 200 same charge again | 402 declined | 503 refused, nothing charged
    GET  /charges?reference=R              200 the charge | 404 none
    GET  /stats?prefix=P   (or ?reference=R) counts over matching references
    POST /faults           {"reference": R or "*", "delay": s, "jitter": s, "fail": n, "fail_rate": p,
                            "decline": bool}: sleep delay + random(0, jitter) before answering; refuse the next
                           n calls (or each with probability p) with 503; decline the card with 402
    POST /faults/reset     forget every fault

Run: python3 provider.py --port 8090   (loopback only)
"""
import argparse
import itertools
import json
import random
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

lock = threading.Lock()
charges = {}  # reference -> charge
counts = defaultdict(lambda: {"calls": 0, "refused": 0, "declined": 0, "lookups": 0})
faults = {}  # reference or "*" -> fault settings
charge_ids = itertools.count(1)


def fault_for(reference):
    return faults.get(reference) or faults.get("*") or {}


class Provider(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the services' HTTP clients expect

    def log_message(self, *args):  # quiet: the harness prints what matters
        pass

    def reply(self, status, payload):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_json(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_POST(self):
        path = urlparse(self.path).path
        if path == "/charges":
            self.charge(self.read_json())
        elif path == "/faults":
            spec = self.read_json()
            with lock:
                faults[spec.pop("reference", "*")] = spec
            self.reply(200, {"ok": True})
        elif path == "/faults/reset":
            self.read_json()
            with lock:
                faults.clear()
            self.reply(200, {"ok": True})
        else:
            self.reply(404, {"error": "not found"})

    def charge(self, req):
        reference = req.get("reference")
        if not reference:
            self.reply(400, {"error": "reference is required"})
            return
        with lock:
            fault = dict(fault_for(reference))
        # Slowness comes first, so a client of the service can give up while the charge is still on its way.
        time.sleep(fault.get("delay", 0) + random.uniform(0, fault.get("jitter", 0)))
        with lock:
            tally = counts[reference]
            live = faults.get(reference)
            if live and live.get("fail", 0) > 0:
                live["fail"] -= 1
                tally["refused"] += 1
                status, payload = 503, {"error": "provider unavailable, nothing charged"}
            elif random.random() < fault.get("fail_rate", 0):
                tally["refused"] += 1
                status, payload = 503, {"error": "provider unavailable, nothing charged"}
            elif fault.get("decline"):
                tally["declined"] += 1
                status, payload = 402, {"error": "card_declined"}
            else:
                tally["calls"] += 1
                if reference in charges:
                    status = 200
                else:
                    status = 201
                    charges[reference] = {
                        "id": "ch_%06d" % next(charge_ids),
                        "reference": reference,
                        "amount": req.get("amount"),
                        "currency": req.get("currency"),
                        "customer_id": req.get("customer_id"),
                        "status": "succeeded",
                    }
                payload = charges[reference]
        self.reply(status, payload)

    def do_GET(self):
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/charges":
            reference = query.get("reference", "")
            with lock:
                counts[reference]["lookups"] += 1
                charge = charges.get(reference)
            if charge:
                self.reply(200, charge)
            else:
                self.reply(404, {"error": "no such charge"})
        elif url.path == "/stats":
            self.reply(200, stats(query.get("reference"), query.get("prefix", "")))
        else:
            self.reply(404, {"error": "not found"})


def stats(reference, prefix):
    with lock:
        refs = [reference] if reference else [r for r in counts if r.startswith(prefix)]
        out = {"references": 0, "charges": 0, "calls": 0, "refused": 0, "declined": 0, "lookups": 0,
               "double_charged": []}
        for r in refs:
            tally = counts.get(r)
            if not tally:
                continue
            out["references"] += 1
            out["charges"] += r in charges
            for field in ("calls", "refused", "declined", "lookups"):
                out[field] += tally[field]
            if tally["calls"] > 1:
                out["double_charged"].append(r)
        if reference:
            out["charge"] = charges.get(reference)
        return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Provider)
    server.daemon_threads = True
    print(f"provider listening on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
