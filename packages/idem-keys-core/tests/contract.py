"""The one contract of the five middlewares (contract/ at the repository root, or $IDEM_CONTRACT_DIR), as data."""
import json
import os
import re
from pathlib import Path

DIR = Path(os.environ.get("IDEM_CONTRACT_DIR") or Path(__file__).resolve().parents[3] / "contract")


def load(name):
    with open(DIR / f"{name}.json", encoding="utf-8") as f:
        return json.load(f)


def folded(sql):
    """A statement with its whitespace folded and its placeholders as psycopg writes them: $1, $2, ... in order
    become %s (a $n out of order could not be written as %s)."""
    numbers = [int(n) for n in re.findall(r"\$(\d+)", sql)]
    assert numbers == list(range(1, len(numbers) + 1)), f"placeholders out of order: {sql}"
    return " ".join(re.sub(r"\$\d+", "%s", sql).split())
