#!/usr/bin/env python3
"""Generated requests for the fingerprint comparison (tests/portable/run.sh): JSON values as COPY text, one per
line with its UTF-8 bytes, from a fixed seed. They aim at what the canonical form must get right: numbers with
and without trailing fractional zeros, exponents, negative zero, digits and '-' inside strings and keys,
escapes, non-ASCII text, key order and duplicate keys, nesting, and every JSON type."""
import json
import random

rng = random.Random(20261203)
WORDS = ["amount", "currency", "id", "a", "", "1", "-1", "0.10", "x-y", "naïve", "日本", "🙂", "k\"q", "back\\slash",
         "tab\tnew\nline", "9 lives", "e5", "-", "1.0", "null"]


def number() -> str:
    kind = rng.randrange(9)
    if kind == 0:
        return str(rng.randrange(-10**6, 10**6))
    if kind == 1:
        return f"{rng.randrange(0, 1000)}.{'0' * rng.randrange(1, 5)}"
    if kind == 2:
        return f"-{rng.randrange(0, 3)}.{rng.choice(['0', '00', '10', '5', '50', '05'])}"
    if kind == 3:
        return f"{rng.randrange(1, 99)}e{rng.randrange(-5, 6)}"
    if kind == 4:
        return f"{rng.randrange(1, 99)}.{rng.randrange(0, 99)}E+{rng.randrange(0, 4)}"
    if kind == 5:
        return rng.choice(["0", "-0", "0.0", "-0.0", "0.000", "100", "100.0", "1.10", "10.010", "1e0", "0.5e1"])
    if kind == 6:
        return str(rng.randrange(10**20, 10**25)) + "." + "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 12)))
    if kind == 7:
        return "0." + "0" * rng.randrange(0, 6) + str(rng.randrange(1, 1000)) + "0" * rng.randrange(0, 3)
    return f"{rng.random() * rng.choice([1, 1000, 1e-3]):.{rng.randrange(0, 8)}f}"


def text() -> str:
    if rng.random() < 0.5:
        return json.dumps(rng.choice(WORDS), ensure_ascii=rng.random() < 0.5)
    return json.dumps("".join(rng.choice("ab-0123456789.\"\\ é\u00e9\u2028") for _ in range(rng.randrange(0, 10))),
                      ensure_ascii=rng.random() < 0.5)


def value(depth: int) -> str:
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return number()
    if kind == 1:
        return text()
    if kind == 2:
        return rng.choice(["true", "false", "null"])
    if kind == 3:
        return number() if rng.random() < 0.5 else text()
    if kind in (4, 5):
        members = [f"{text()}{rng.choice([':', ': ', ' :'])}{value(depth + 1)}" for _ in range(rng.randrange(0, 5))]
        return "{" + rng.choice([",", ", "]).join(members) + "}"
    return "[" + rng.choice([",", ", "]).join(value(depth + 1) for _ in range(rng.randrange(0, 5))) + "]"


def copy_text(field: str) -> str:
    return field.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


for _ in range(25000):
    request = value(0)
    print(copy_text(request) + "\t" + copy_text("\\x" + request.encode().hex()))
