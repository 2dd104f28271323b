"""Checks that the extension's modules import downwards: the graph of `crate::<module>` references between the
top-level modules of src/ (a directory counts as one module) has no circle. Prints the graph; exits 1 naming a
circle when there is one. Run by `make test` (the pgtest stage) so a circle cannot come back unnoticed."""
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
SKIP = {"lib", "tests"}  # the crate root declares every module; the tests use everything


def graph():
    edges = {}
    for path in sorted(SRC.rglob("*.rs")):
        module = path.relative_to(SRC).parts[0].removesuffix(".rs")
        if module in SKIP:
            continue
        uses = edges.setdefault(module, set())
        text = path.read_text()
        if "crate::{" in text:
            sys.exit(f"check_imports: {path} imports with crate::{{…}}; name each module as crate::<module>")
        uses.update(m for m in re.findall(r"\bcrate::(\w+)", text) if m != module)
    return edges


def circle(edges):
    """A circle as a list of modules (first == last), or None."""
    state = {}

    def visit(module, path):
        state[module] = "open"
        for used in sorted(edges.get(module, ())):
            if state.get(used) == "open":
                return path[path.index(used):] + [used]
            if used not in state:
                found = visit(used, path + [used])
                if found:
                    return found
        state[module] = "done"
        return None

    for module in sorted(edges):
        if module not in state:
            found = visit(module, [module])
            if found:
                return found
    return None


def main():
    edges = graph()
    for module in sorted(edges):
        print(f"{module} -> {', '.join(sorted(edges[module])) or '(nothing)'}")
    found = circle(edges)
    if found:
        sys.exit(f"check_imports: modules import each other in a circle: {' -> '.join(found)}")
    print(f"check_imports: {len(edges)} modules, no circle")


if __name__ == "__main__":
    main()
