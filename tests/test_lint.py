"""pyflakes over the project's Python: no unused import or local, no undefined name."""
from pathlib import Path

import pytest

pytest.importorskip("pyflakes", reason="pyflakes is a dependency of the project (pip install -e .)")
from pyflakes.api import checkPath  # noqa: E402
from pyflakes.reporter import Reporter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class _Collect(Reporter):
    def __init__(self):
        self.found = []

    def flake(self, message):
        self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")


def test_pyflakes_is_clean():
    rep = _Collect()
    files = sorted(p for d in ("pipeline", "scripts", "tests", "hydra_plugins") for p in (ROOT / d).rglob("*.py"))
    assert len(files) > 50
    for p in files:
        checkPath(str(p), rep)
    assert rep.found == [], "\n".join(rep.found)


def test_no_project_file_needs_a_folder_outside_the_repository():
    """Docs, configs, scripts and code speak of the software: no path into a folder beside the
    checkout (CI's own script may use one when it is there), no limits of a particular machine."""
    import subprocess
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    found = []
    for name in tracked:
        p = ROOT / name
        if name.startswith((".ci/", "docs/gpu-runs/")) or p.suffix not in (".py", ".md", ".yaml", ".sh", ".toml"):
            continue
        text = p.read_text(errors="replace")
        for bad in ("/".join(("..", "shared")), "-".join(("10", "minute"))):   # spelled so this file has neither
            if bad in text:
                found.append(f"{name}: {bad}")
    assert found == []
