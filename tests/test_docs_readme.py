"""The README is a way in and docs/ is present-tense reference (issue #50).

* README.md is at most 120 lines and 1,000 words, and every command in its code blocks is either parsed by
  normbench's own argument parser (``normbench.cli.build_parser``; never run here) or names something that exists:
  a script in the repository, an ASV command ASV's parser accepts, a ``torchrun`` line torch's parser accepts, a
  path ``pytest`` or ``pip`` is pointed at.
* Every relative link in README.md, CHANGELOG.md and docs/ resolves to a file inside the repository; no text points
  at ``../shared/`` (a folder beside the repository).
* The site's methodology pages, built from docs/ the way ``normbench site build`` builds them, carry no development
  history: no pass headings, no dates of development work, no account of who worked on what; docs/history/ is not
  published.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

# --- README: size ---------------------------------------------------------------------------------------------------


def test_readme_is_at_most_120_lines_and_1000_words_without_dates():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    words = text.split()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines (at most 120)"
    assert len(words) <= 1000, f"README.md has {len(words)} words (at most 1,000)"
    dates = re.findall(r"\b20\d\d-\d\d-\d\d\b", text)
    assert not dates, f"README.md holds dates {dates}: dated measurements belong in docs/"


# --- README: every command parsed or known --------------------------------------------------------------------------

FENCE = re.compile(r"^```([A-Za-z]*)\s*\n(.*?)^```\s*$", re.S | re.M)
SHELL_LANGS = {"bash", "sh", "shell", "console", ""}
ENV_ASSIGN = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def readme_commands(text: str) -> list[list[str]]:
    """The commands of the README's shell code blocks, one argv each: comments and leading ``VAR=value`` assignments
    dropped; a block without a language counts only if its lines look like commands (not a file tree)."""
    out = []
    for lang, body in FENCE.findall(text):
        if lang.lower() not in SHELL_LANGS:
            continue
        for line in body.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            argv = shlex.split(line, comments=True)
            while argv and ENV_ASSIGN.match(argv[0]):
                argv = argv[1:]
            if argv:
                out.append(argv)
    return out


def _normbench_args(argv: list[str]) -> list[str] | None:
    """The arguments after the normbench command in ``argv`` (``normbench``, ``.venv/bin/normbench``,
    ``python -m normbench.cli``), else None."""
    if Path(argv[0]).name == "normbench":
        return argv[1:]
    if Path(argv[0]).name.startswith("python") and argv[1:3] == ["-m", "normbench.cli"]:
        return argv[3:]
    return None


def _parses(parser, args: list[str]) -> str | None:
    """None when ``parser`` accepts ``args``, else argparse's message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except SystemExit as e:
        return f"exit {e.code}: {err.getvalue().strip()}"
    return None


def _asv_parser():
    from asv.commands import make_argparser

    return make_argparser()[0]


def _torchrun_parser():
    from torch.distributed.run import get_args_parser

    return get_args_parser()


def check_command(argv: list[str], normbench_parser) -> str | None:
    """None when the command is parsed by its program's own parser or names what exists; else why not."""
    args = _normbench_args(argv)
    if args is not None:
        return _parses(normbench_parser, args)
    prog, rest = Path(argv[0]).name, argv[1:]  # .venv/bin/asv is asv
    if prog == "bash":
        return None if rest and (REPO / rest[0]).is_file() else f"no script {rest[:1]}"
    if prog == "asv":
        return _parses(_asv_parser(), rest)
    if prog == "torchrun":
        bad = _parses(_torchrun_parser(), rest)
        if bad:
            return bad
        i = rest.index("-m") if "-m" in rest else -1
        if i >= 0 and rest[i + 1] == "normbench.cli":
            return _parses(normbench_parser, rest[i + 2:])
        return None
    if prog == "pytest" or (prog.startswith("python") and rest[:2] == ["-m", "pytest"]):
        paths = [a for a in (rest if prog == "pytest" else rest[2:]) if not a.startswith("-")]
        missing = [p for p in paths if not (REPO / p.split("::")[0]).exists()]
        return f"no such test path {missing}" if missing else None
    if prog == "pip" and rest[:1] == ["install"]:
        paths = [a for a in rest[1:] if not a.startswith("-")]
        missing = [p for p in paths if not (REPO / p.strip("'\"").split("[")[0]).exists()]
        return f"no such package path {missing}" if missing else None
    if prog in ("cd", "source", "git"):
        return None
    return f"unknown program {prog!r}: parse it or check it in tests/test_docs_readme.py"


def test_every_readme_command_is_parsed_by_its_program_or_names_what_exists():
    from normbench.cli import build_parser

    parser = build_parser()
    commands = readme_commands(README.read_text(encoding="utf-8"))
    assert any(c[:2] == ["bash", "scripts/main.sh"] for c in commands)
    assert any(c[:2] == ["bash", "scripts/test.sh"] for c in commands)
    assert sum(_normbench_args(c) is not None for c in commands) >= 5
    bad = {shlex.join(c): why for c in commands if (why := check_command(c, parser))}
    assert not bad, bad


def test_the_command_check_goes_red_on_a_wrong_command():
    """The extractor and the checks catch what they are for: an option normbench does not have, a missing script,
    an unknown ASV command, an unknown program."""
    from normbench.cli import build_parser

    parser = build_parser()
    text = ("```bash\n.venv/bin/normbench bench --no-such-option   # comment\nbash scripts/nope.sh\n"
            "asv frobnicate\nmake all\nNORMBENCH_X=1 normbench list --json\n```\n```toml\n[project]\n```\n")
    cmds = readme_commands(text)
    assert [c[0] for c in cmds] == [".venv/bin/normbench", "bash", "asv", "make", "normbench"]
    verdicts = [check_command(c, parser) for c in cmds]
    assert all(verdicts[:4]) and verdicts[4] is None, verdicts
    # .ci/run runs the README's test command
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()


# --- links stay in the repository -----------------------------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def doc_files() -> list[Path]:
    files = [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [f for f in files if f.is_file()]


def _strip_code(text: str) -> str:
    """``text`` without fenced code blocks and code spans (a link inside code is not a link)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    out = []
    for target in LINK.findall(_strip_code(path.read_text(encoding="utf-8"))):
        if re.match(r"^(https?:|mailto:|#)", target):
            continue
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            out.append(f"{target} (a scheme that leaves the repository)")
            continue
        rel = target.split("#", 1)[0]
        dest = (path.parent / rel).resolve()
        if not dest.is_relative_to(root):
            out.append(f"{target} (outside the repository)")
        elif not dest.exists():
            out.append(f"{target} (no such file)")
    return out


def test_every_docs_link_resolves_inside_the_repository():
    assert len(doc_files()) > 10
    bad = {str(f.relative_to(REPO)): b for f in doc_files() if (b := broken_links(f))}
    assert not bad, bad
    shared = [str(f.relative_to(REPO)) for f in doc_files() if "../shared" in f.read_text(encoding="utf-8")]
    assert not shared, f"these point at ../shared/, outside the repository: {shared}"
    # a document named in code (the site shows relative links as text, so published pages name them this way)
    named = {m for f in doc_files() for m in re.findall(r"`(docs/[\w./-]+\.md)(?:#[\w-]+)?`", f.read_text("utf-8"))}
    assert named and not [m for m in named if not (REPO / m).is_file()], sorted(m for m in named
                                                                               if not (REPO / m).is_file())


def test_the_link_check_goes_red_on_a_link_out_of_the_repository(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "measurement.md").write_text("# M\n")
    page = tmp_path / "docs" / "x.md"
    page.write_text("[a](../../outside.md) [b](missing.md#x) [c](measurement.md#the-ceiling) [d](https://e.org) "
                    "`[e](no.md)` [f](file:///etc/passwd)\n```\n[g](nope.md)\n```\n")
    assert broken_links(page, root=tmp_path) == ["../../outside.md (outside the repository)",
                                                 "missing.md#x (no such file)",
                                                 "file:///etc/passwd (a scheme that leaves the repository)"]


# --- the built site's methodology pages carry no development history -------------------------------------------------

ORDINAL = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|last|next|"
           r"\d+(?:st|nd|rd|th))")
DATE = r"\d{4}-\d{2}-\d{2}"
#: A pass heading: an ordinal pass or round of development ("Third pass", "Second round", "Sixth pass (lead, ...")
#: in a heading or a bold lead-in, or anywhere when a date or a name follows it.
PASS_HEAD = re.compile(rf"\b{ORDINAL}\s+(?:pass|round)\b", re.I)
PASS_TEXT = re.compile(rf"\b{ORDINAL}\s+(?:pass|round)\b\s*[(,:]\s*(?:{DATE}|lead|wt-)", re.I)
#: Dates of development work: a date in a heading or a bold lead-in, or a date telling when the code changed
#: ("since 2026-11-26", "until 2026-11-27's ...", "fixed 2026-11-25"). A dated measurement in the text, with the
#: command that repeats it, is reference and stays.
CHANGE_DATE = re.compile(rf"\b(?:since|until|fixed|fixed on|changed|introduced|before|after)\s+{DATE}", re.I)
HEAD_DATE = re.compile(DATE)
#: Who worked on what: sessions, engineers, the lead, worktrees and branches of development.
WHO = re.compile(r"\b(?:this|that|another|other|the previous|the lead's|previous)\s+sessions?(?:'s?)?\b"
                 r"|\bother engineers?(?:'s?)?\b|\bengineer's\b|\(lead\b|\bthe lead's\b|\bwt-[a-z0-9]+"
                 r"|\bthis branch\b|\bmain (?:before|at) [0-9a-f]{7}\b", re.I)


def _heads(html: str) -> list[str]:
    """The text of the page's headings and bold lead-ins."""
    found = re.findall(r"<(h[1-6]|strong)\b[^>]*>(.*?)</\1>", html, re.S)
    return [re.sub(r"<[^>]+>", "", inner) for _, inner in found]


def _text(html: str) -> str:
    main = re.search(r"<main\b.*?</main>", html, re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", main.group(0) if main else html))


def history_found(html: str) -> list[str]:
    """What in one built page reads as development history (empty: none)."""
    out = []
    for head in _heads(html):
        if PASS_HEAD.search(head) or HEAD_DATE.search(head):
            out.append(f"heading: {head.strip()[:100]}")
    text = _text(html)
    for pat in (PASS_TEXT, CHANGE_DATE, WHO):
        for m in pat.finditer(text):
            out.append(f"text: …{text[max(0, m.start() - 40):m.end() + 40]}…")
    return out


@pytest.fixture(scope="module")
def built_methodology(tmp_path_factory):
    """The site built from one committed record file and the repository's docs/, the way ``normbench site build``
    builds it (charts off: the methodology pages have none)."""
    from normbench.records.store import iter_records
    from normbench.site import build_site

    root = tmp_path_factory.mktemp("docsite")
    src = REPO / "results" / "kernel" / "cpu-amd-epyc-2c" / "none.json.gz"
    dest = root / "results" / src.relative_to(REPO / "results")
    dest.parent.mkdir(parents=True)
    shutil.copy(src, dest)
    assert list(iter_records(root / "results"))
    report = build_site(root / "results", root / "site", docs=REPO / "docs", charts=False)
    assert report.kernel >= 1
    return root / "site"


def test_the_methodology_pages_hold_no_development_history(built_methodology):
    from normbench.site.pages import DOCS

    pages = sorted((built_methodology / "methodology").glob("*.html"))
    assert {p.stem for p in pages} == {name for name, _, _ in DOCS}
    found = {}
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert "(file missing" not in html.lower() and len(_text(html)) > 500, page.name
        if got := history_found(html):
            found[page.name] = got
    assert not found, found


def test_docs_history_is_not_published(built_methodology):
    history = sorted((REPO / "docs" / "history").glob("*.md"))
    assert history, "docs/history/ holds the development history"
    published = "".join(p.read_text(encoding="utf-8") for p in built_methodology.rglob("*.html"))
    for h in history:
        first = next(line for line in h.read_text(encoding="utf-8").splitlines() if line.startswith("# "))
        assert first[2:].strip() not in published, f"{h.name} is published"


def test_the_history_patterns_catch_what_they_are_for():
    """Each pattern goes red on the history that was in docs/ before issue #50, and stays quiet on reference text."""
    from normbench.site import markdown

    history = [
        "#### Second round: profiled (2026-11-26)",
        "**Sixth pass (lead, 2026-11-27, night): a rebuild that does not unpickle.**",
        "**Third pass (2026-11-27, afternoon): the forward.** What the lean floor showed",
        "until 2026-11-27's fourth pass rows wider than 8192 kept two values",
        "- **PowerNorm's warm-up is the learning-rate warm-up (fixed 2026-11-25).** During",
        "Measured on `cpu-intel-xeon-2c`, 2026-11-26 (this session's machine; nothing else running)",
        "loaded by two other engineers' work",
        "### Issue #30: the 100k-record build (2026-11-25, this 2-core machine)",
    ]
    for md in history:
        html = f"<main>{markdown.render(md)}</main>"
        assert history_found(html), md
    reference = ("Measured 2026-11-26 on `cpu-intel-xeon-2c` (`python scripts/ceiling_noise.py --runs 20`): the "
                 "spread stays under 3 %. A kernel engineer compares against Liger. The first pass over x makes "
                 "the sums; the second pass reads it from L2.")
    assert not history_found(f"<main>{markdown.render(reference)}</main>")


def test_no_doc_outside_docs_history_holds_development_history():
    """The same patterns over README.md and every docs/*.md, published or not (docs/history/ aside)."""
    from normbench.site import markdown

    found = {}
    for f in [README, *sorted((REPO / "docs").glob("*.md"))]:
        html = f"<main>{markdown.render(f.read_text(encoding='utf-8'))}</main>"
        if got := history_found(html):
            found[str(f.relative_to(REPO))] = got
    assert not found, found
