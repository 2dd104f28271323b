"""The time budget of a test run: reads a `make test` log (the "=== stage NAME: ok in N s" lines that
scripts/test.sh prints) and prints each stage's time and share of the total, slowest first, and a warning when
the total passes the budget line. It never fails the run: the warning is for the next stage added, which must pay
for itself.

    python3 scripts/stage_table.py LOG TOTAL_SECONDS [WARN_MINUTES]
"""
import re
import sys

STAGE = re.compile(r"^=== stage (.+?): (?:ok|FAILED) (?:in|after) (\d+) s$")
# Lines that time a group of stages listed one by one too (a whole major inside its root), and stages that ran
# beside others (scripts/test.sh: the other majors' builds in the background, BESIDE): the shares overlap.
NOTES = ((re.compile(r"^all of pg\d+$"), "the stages of that major, listed one by one"),
         (re.compile(r"^build \(pg\d+\)$"), "in the background, while the host's stages ran"),
         (re.compile(r"^worker \(pg\d+\)$"), "beside the stages after it"))


def main():
    log, total = sys.argv[1], int(sys.argv[2])
    warn_minutes = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    stages = []
    with open(log, errors="replace") as f:
        for line in f:
            m = STAGE.match(line.strip())
            if m:
                stages.append((m.group(1), int(m.group(2))))
    print(f"=== time budget: {total} s in all ({total / 60:.1f} min)")
    width = max((len(name) for name, _ in stages), default=10)
    for name, seconds in sorted(stages, key=lambda s: -s[1]):
        share = 100 * seconds / total if total else 0
        note = next((f"  ({text})" for pattern, text in NOTES if pattern.match(name)), "")
        print(f"  {name:<{width}}  {seconds:>5} s  {share:5.1f} %{note}")
    if total > warn_minutes * 60:
        print(f"=== WARNING: the run took {total / 60:.1f} min, past the {warn_minutes}-minute line of the test "
              "budget (docs/testing.md): make a stage cheaper before adding one")


if __name__ == "__main__":
    main()
