"""The documentation's `python -m pipeline ...` commands compose and pass the config checks.

Every command of README.md and docs/models/*.md (a line of a code block, or an inline code span,
which may wrap over lines) is composed in-process as the CLI would compose it, its interpolations
resolved and :func:`pipeline.config.validate` run, so a doc command whose override no longer exists
(a renamed key, a removed variant or experiment) fails here instead of in a reader's terminal.
No command runs. How the docs write a command, and how it is read here:

- ``-m`` with comma lists is a sweep: each of its jobs is composed;
- ``key=a|b`` means "a, or b" (several runs written as one): each is composed;
- a trailing ``# comment`` and a ``...`` standing for more overrides are dropped;
- ``--help`` / ``--cfg job`` only print: the rest of the command is composed;
- a flag after an override fails (the CLI's argparse takes flags first).
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs" / "models").glob("*.md"))]

_FENCE = re.compile(r"^\s*```")
_LINE_CMD = re.compile(r"^\s*(?:\$\s*)?python3? -m pipeline(?=\s|$)(.*)$")
_INLINE = re.compile(r"`python3? -m\s+pipeline(?=[\s`])([^`]*)`")
# printed, not run: their values are composed the same
_PRINT_ONLY = {"--help", "-h", "--cfg", "--resolve", "job", "--cfg=job"}


def doc_commands(text: str):
    """The `python -m pipeline` commands of a Markdown text: [(line number, command text)]."""
    out, prose, fenced = [], [], False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            prose.append((n, ""))
            continue
        if fenced:
            m = _LINE_CMD.match(line)
            if m:
                out.append((n, m.group(1).split(" #")[0].strip()))
            prose.append((n, ""))
        else:
            prose.append((n, line))
    # inline code spans may wrap: search the prose as one text, keeping each character's line
    joined, starts = "", []
    for n, line in prose:
        starts.append((len(joined), n))
        joined += line + "\n"
    for m in _INLINE.finditer(joined):
        n = max(ln for pos, ln in starts if pos <= m.start())
        out.append((n, " ".join(m.group(1).split())))
    return sorted(out)


def runs(command: str):
    """The override lists one doc command stands for (see the module docstring)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    words = [w for w in command.split() if w not in _PRINT_ONLY and w != "..."]
    sweep = "-m" in words or "--multirun" in words
    words = [w for w in words if w not in ("-m", "--multirun")]
    choices = []
    for w in words:
        key, eq, value = w.partition("=")
        alts = [f"{key}={v}" for v in value.split("|")] if eq and "|" in value else [w]
        if sweep:
            parsed = OverridesParser.create().parse_overrides(alts)
            alts = [f"{o.get_key_element()}={v}" if o.is_sweep_override() else a
                    for a, o in zip(alts, parsed)
                    for v in (o.sweep_string_iterator() if o.is_sweep_override() else [None])]
        choices.append(alts)
    return [list(c) for c in itertools.product(*choices)]


def _all():
    cases = []
    for doc in DOCS:
        for line, cmd in doc_commands(doc.read_text()):
            cases.append(pytest.param(cmd, id=f"{doc.relative_to(ROOT)}:{line}"))
    return cases


CASES = _all()


def check_command(compose, command: str):
    """None when every run of the command composes and validates, else the first one-line reason."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from pipeline.app import one_line
    from pipeline.config import validate
    from pipeline.errors import ConfigError
    from pipeline.isolated_jobs import quiet_schema_warning
    quiet_schema_warning()
    words = command.split()
    late = [w for i, w in enumerate(words) if w.startswith("-") and any("=" in v for v in words[:i])]
    if late:   # `python -m pipeline a=1 -m b=1,2`: argparse stops at the first override
        return f"{' '.join(late)} after an override: the CLI takes flags first (unrecognized arguments)"
    for overrides in runs(command):
        try:
            cfg = compose(overrides)
            OmegaConf.to_container(cfg, resolve=True)
            validate(cfg)
        except ConfigError as e:
            return f"{' '.join(overrides)}: {e}"
        except (HydraException, OmegaConfBaseException) as e:
            return f"{' '.join(overrides)}: {one_line(e)}"
    return None


def test_the_docs_have_commands():
    per_doc = {d.name: len(doc_commands(d.read_text())) for d in DOCS}
    assert per_doc["README.md"] >= 3, per_doc
    assert all(per_doc[f"{m}.md"] for m in ("bcm", "bcm_cnn", "sparse_dnn", "wide", "slide", "argueta")), per_doc


@pytest.mark.parametrize("command", CASES)
@pytest.mark.slow
def test_doc_command_composes(compose, command):
    why = check_command(compose, command)
    if why:
        pytest.fail(f"python -m pipeline {command}\n  does not compose: {why}", pytrace=False)


def test_extraction_and_a_stale_command_fails(compose):
    """The reader finds commands in code blocks and wrapped inline spans, expands sweeps and
    alternatives, and a command with a key no schema knows is reported."""
    text = ("Run\n```bash\npython -m pipeline model=bcm block_size=64   # note\n```\n"
            "or `python -m pipeline -m model=bcm\nblock_size=16,32` and `python -m pipeline.data.fetch mnist`.\n")
    found = doc_commands(text)
    assert found == [(3, "model=bcm block_size=64"), (5, "-m model=bcm block_size=16,32")], found
    assert runs(found[1][1]) == [["model=bcm", "block_size=16"], ["model=bcm", "block_size=32"]]
    assert runs("model=softmax_topn model.vec=4|8 ...") == [["model=softmax_topn", "model.vec=4"],
                                                          ["model=softmax_topn", "model.vec=8"]]
    assert check_command(compose, found[0][1]) is None
    bad = check_command(compose, found[0][1].replace("block_size", "model.blok_size"))
    assert bad and "model.blok_size" in bad, bad
    assert check_command(compose, "model=bcm kernel=no_such_variant")
    assert check_command(compose, "experiment=no_such_table")
    assert "flags first" in check_command(compose, "experiment=cuwide_table5 -m model.k=3,10")
    assert check_command(compose, "-m experiment=cuwide_table5 model.k=3,10") is None
