"""Makes the eval farm's demo repository: a small Python project (``calc``)
with two bugs, its unit tests, and a dependency (``tinyfmt``) vendored as a
wheel, since sandboxes here reach no package index. Serve the bare repository
it writes with ``git daemon`` (or any git server) and pass its URL to farm.py.

    python3 demo_repo.py /srv/git/calc.git
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CALC = '''"""calc: a few statistics, as an agent would find them: with bugs."""

from tinyfmt import fixed


def mean(xs):
    return sum(xs) / (len(xs) + 1)


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def clamp(x, lo, hi):
    return max(lo, min(x, hi))


def report(xs):
    return f"mean={fixed(mean(xs))} median={fixed(median(xs))}"
'''

TESTS = '''import unittest

import calc


class CalcTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(calc.mean([1, 2, 3, 4]), 2.5)

    def test_mean_one(self):
        self.assertEqual(calc.mean([7]), 7)

    def test_median_odd(self):
        self.assertEqual(calc.median([3, 1, 2]), 2)

    def test_median_even(self):
        self.assertEqual(calc.median([4, 1, 3, 2]), 2.5)

    def test_clamp(self):
        self.assertEqual([calc.clamp(x, 0, 10) for x in (-5, 5, 50)], [0, 5, 10])

    def test_report(self):
        self.assertEqual(calc.report([1, 2, 3]), "mean=2.00 median=2.00")


if __name__ == "__main__":
    unittest.main()
'''

TINYFMT = '''"""tinyfmt: number formatting (the demo project's dependency)."""


def fixed(x, places=2):
    return f"{x:.{places}f}"
'''


def wheel(name: str, version: str, files: dict[str, str]) -> bytes:
    """A pure-Python wheel holding files (path → text)."""
    dist = f"{name}-{version}.dist-info"
    meta = {
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: demo_repo\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    entries = {**files, **meta}
    record = []
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in entries.items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{dist}/RECORD,,")
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return buf.getvalue()


def make(bare: Path) -> None:
    """Writes the demo project as a bare repository at bare (branch main)."""
    env = dict(os.environ, GIT_AUTHOR_NAME="farm", GIT_AUTHOR_EMAIL="farm@example.test", GIT_COMMITTER_NAME="farm",
               GIT_COMMITTER_EMAIL="farm@example.test", GIT_CONFIG_NOSYSTEM="1", HOME=str(bare.parent))
    with tempfile.TemporaryDirectory() as work:
        w = Path(work)
        (w / "calc").mkdir()
        (w / "calc" / "__init__.py").write_text(CALC)
        (w / "tests").mkdir()
        (w / "tests" / "__init__.py").write_text("")
        (w / "tests" / "test_calc.py").write_text(TESTS)
        (w / "vendor").mkdir()
        (w / "vendor" / "tinyfmt-1.0-py3-none-any.whl").write_bytes(wheel("tinyfmt", "1.0", {"tinyfmt/__init__.py": TINYFMT}))
        (w / "requirements.txt").write_text("tinyfmt==1.0\n")
        (w / ".gitignore").write_text(".deps/\n__pycache__/\n")
        for cmd in (["git", "init", "-q", "-b", "main", "."], ["git", "add", "."], ["git", "commit", "-qm", "calc with two bugs"]):
            subprocess.run(cmd, cwd=w, env=env, check=True)
        subprocess.run(["git", "init", "-q", "--bare", str(bare)], env=env, check=True)
        subprocess.run(["git", "push", "-q", str(bare), "main"], cwd=w, env=env, check=True)
        subprocess.run(["git", "-C", str(bare), "symbolic-ref", "HEAD", "refs/heads/main"], env=env, check=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: demo_repo.py BARE_REPO_DIR")
    make(Path(sys.argv[1]))
