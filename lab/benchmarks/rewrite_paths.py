"""Rewrites references to moved benchmark files across the repo (issue 19); safe to run again.

    python3 lab/benchmarks/rewrite_paths.py lab/benchmarks/results_map.tsv [--check]

The map holds `old<TAB>new` repo paths. A results file named by its full path, by `results/NAME`, or by its
bare name in prose becomes its new full path; a script path `benchmarks/x.py` becomes `lab/benchmarks/x.py`.
Names after any other `/` (for example `--out "$OUT/NAME"` in a job script) are left alone: they name
scratch files. The committed results themselves are records and are never rewritten.
"""

import re
import subprocess
import sys
from pathlib import Path

SCOPES = ["docs", "README.md", "src", "tests", "lab", "benchmarks", "tools", ".ci"]
SKIP = ("benchmarks/results/", "lab/benchmarks/results_map", "lab/benchmarks/scripts_map.tsv")
RESULTS = "benchmarks/results/"
CODE_JOIN = re.compile(r"""results["']\s*/\s*["']$""")


def load(path: str) -> list[tuple[str, str]]:
    pairs = [line.rstrip("\n").split("\t") for line in Path(path).read_text().splitlines() if line.strip()]
    return sorted(((a, b) for a, b in pairs), key=lambda p: -len(p[0]))


def rewrite_result(text: str, old: str, new: str) -> str:
    name, target = old[len(RESULTS) :], new[len(RESULTS) :]
    tail = r"(?![A-Za-z0-9_])" if "." in name else r"(?![A-Za-z0-9_]|\.py|\.sh)"
    pattern = re.compile(r"(?<![A-Za-z0-9_-])" + re.escape(name) + tail)
    out, last = [], 0
    for m in pattern.finditer(text):
        before = text[: m.start()]
        if CODE_JOIN.search(before):  # Path(...) / "results" / "NAME": one string per part
            repl = target.replace("/", f"{before[-1]} / {before[-1]}")
        elif before.endswith("results/"):
            repl = target
        elif before.endswith("/"):
            continue
        else:
            repl = RESULTS + target
        out.append(text[last : m.start()] + repl)
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def rewrite_script(text: str, old: str, new: str) -> str:
    pattern = re.compile(r"(?<![A-Za-z0-9_/.-])" + re.escape(old) + r"(?![A-Za-z0-9_])")
    return pattern.sub(new, text)


def main(argv: list[str]) -> int:
    pairs = load(argv[0])
    check = "--check" in argv
    files = subprocess.run(["git", "ls-files", *SCOPES], capture_output=True, text=True, check=True).stdout.split()
    changed = []
    for f in files:
        path = Path(f)
        if f.startswith(SKIP) or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new_text = text
        for old, new in pairs:
            if old.startswith(RESULTS):
                new_text = rewrite_result(new_text, old, new)
            else:
                new_text = rewrite_script(new_text, old, new)
        if new_text != text:
            changed.append(f)
            if not check:
                path.write_text(new_text)
    print("\n".join(changed))
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
