"""Every documented command works as written (issue 36): the executable docs test.

The fenced shell blocks (```bash, ```sh, ```shell, ```console) of README.md and docs/*.md run in page order,
each page in its own scratch directory: a fresh copy of the repository's tracked files, as a user runs the
docs from a clone's root, with its own empty ``ENVENGINEER_CACHE``. A block runs as one ``bash`` script
(``set -eo pipefail``), so its commands must all succeed; a later block of the page sees what earlier ones
wrote. ``pip install ...`` is not run (no network, and the test must not change its own environment): inside
the blocks ``pip`` is a function that checks that what the command would install is already installed here
(each named distribution at a matching version, each named extra declared by the package, and the extra's
requirements satisfied unless ``--no-deps``), and fails, naming what is missing, otherwise.

Markers, HTML comments (invisible when rendered) on the line before a block's fence:

- ``<!-- docs-test: skip=REASON -->``: the block is not run; REASON is one of ``SKIP_REASONS`` (more words may
  follow the reason). A block without a marker is run.
- ``<!-- docs-test: exit=N -->``: the block is run, and a command of it exits with status N, as the page says
  (``envengineer plan`` of a run that does not fit: 1); every other command must succeed.
- ``<!-- docs-test: output -->`` before a ```text (or ```console) block: the command block just above must
  print every line of it, in that order (each line, whitespace runs collapsed, as a substring of one output
  line). This is how
  a page declares the figures a deterministic command prints.

Every ``envengineer`` command of every block, run or skipped, and of the plain fenced command lists (a block
whose lines start with ``envengineer``), is checked against the real command line without running it: the verb
(and sub-command) exists and every ``--flag`` is one of its options (for the task commands, or one of the
task's own options).

Why Sybil, used as a parser only: of the libraries for executable docs, pytest-markdown-docs runs Python
fences only and mktestdocs runs a page's bash blocks with no per-block skips, no working directory and no
output check. Sybil lexes Markdown fences and HTML-comment directives (its ``RawFencedCodeBlockLexer`` and
``DirectiveInHTMLCommentLexer``) into ordered regions with line numbers; its own pytest collection only sees
files under pytest's ``testpaths`` (``tests``, not README.md or docs/) and its skip directive carries no reason
to classify, so this file drives the regions itself: a page's scratch directory, the ``pip`` check, the output
comparison and the CLI check (docs/docs-tests.md).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_readme_commands():
    """scripts/readme_commands.py (standard library only: CI runs it before anything is installed): the README's
    two commands and the one comparison of a command's output with the lines a page declares."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_commands", ROOT / "scripts" / "readme_commands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


README_COMMANDS = _load_readme_commands()
PAGES = ["README.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
SHELL = {"bash", "sh", "shell", "console"}
OUTPUT = {"text", "console", "output"}
#: why a block is not run: needs a GPU, a cluster, the network (downloads, API keys, a server), takes over
#: about a minute, is a known failure being fixed, or is a usage line / template rather than a command.
SKIP_REASONS = {"gpu", "cluster", "network", "long", "known", "synopsis"}
BLOCK_TIMEOUT_S = 300  # a run block is one that takes about a minute at most


# ----------------------------------------------------------------------------- parsing (Sybil)


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    language: str
    source: str
    skip: str | None = None  # the skip reason
    skip_note: str = ""
    exit_status: int | None = None  # a command of the block exits with this status (an `exit=N` marker)
    expected: list[str] = field(default_factory=list)  # lines of a following `output` block

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse_page(path: Path, name: str | None = None) -> list[Block]:
    """The page's fenced blocks in order, with their markers applied (Sybil's lexers)."""
    from sybil import Document
    from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, RawFencedCodeBlockLexer

    fences = RawFencedCodeBlockLexer(
        info_pattern=re.compile(r"(?P<language>[^\n]*)$\n", re.MULTILINE), mapping={"language": "language", "source": "source"}
    )
    directives = DirectiveInHTMLCommentLexer(directive="docs-test", arguments=".*?")

    def outermost(document):  # Sybil's lexer also yields the fences shown inside a longer fence
        regions = list(fences(document))
        return [r for r in regions if not any(o is not r and o.start <= r.start and r.end <= o.end for o in regions)]

    def fence_parser(document):
        for region in outermost(document):
            region.parsed = ("fence", region.lexemes["language"].strip(), str(region.lexemes["source"]))
            yield region

    def directive_parser(document):
        spans = [(r.start, r.end) for r in fences(document)]  # a marker shown inside a fence is not a marker
        for region in directives(document):
            if not any(a <= region.start < b for a, b in spans):
                region.parsed = ("marker", region.lexemes["arguments"].strip(), "")
                yield region

    document = Document.parse(str(path), fence_parser, directive_parser)
    name = name or path.name
    blocks: list[Block] = []
    pending: str | None = None
    for example in document.examples():
        kind, info, source = example.parsed
        if kind == "marker":
            if pending is not None:
                raise AssertionError(f"{name}:{example.line}: a docs-test marker after another with no block between")
            pending = info
            continue
        block = Block(name, example.line, info, source)
        if pending is not None:
            marker, pending = pending, None
            words = marker.split(None, 1)
            if words[0] == "output":
                if info not in OUTPUT or not blocks or blocks[-1].language not in SHELL:
                    raise AssertionError(f"{block.where}: `docs-test: output` must mark a ```text block after a shell block")
                blocks[-1].expected = [ln for ln in source.splitlines() if ln.strip()]
                continue
            status = re.fullmatch(r"exit=([1-9]\d*)", words[0])
            if status and info in SHELL:
                block.exit_status = int(status.group(1))
                blocks.append(block)
                continue
            match = re.fullmatch(r"skip=(\w+)", words[0])
            if not match or match.group(1) not in SKIP_REASONS:
                raise AssertionError(f"{block.where}: unknown docs-test marker {marker!r} (skip=REASON, REASON in {sorted(SKIP_REASONS)}, exit=N, or output)")
            if info not in SHELL:
                raise AssertionError(f"{block.where}: a skip marker before a ```{info} block, not a shell block")
            block.skip, block.skip_note = match.group(1), (words[1] if len(words) > 1 else "")
        blocks.append(block)
    if pending is not None:
        raise AssertionError(f"{name}: a docs-test marker at the end of the page with no block after it")
    return blocks


# ----------------------------------------------------------------------------- the CLI check


def _commands(source: str) -> list[tuple[str, list[str]]]:
    """Each ``envengineer ...`` invocation of a block: (the line, its arguments after ``envengineer``)."""
    found = []
    for line in source.replace("\\\n", " ").splitlines():
        text = line.strip()
        if text.startswith("$ "):
            text = text[2:]
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
        except ValueError:
            tokens = text.split()
        for i, token in enumerate(tokens):
            if token != "envengineer" and not token.endswith("/envengineer"):
                continue
            args, depth = [], 0
            for tok in tokens[i + 1 :]:
                depth += tok.count("[") - tok.count("]")
                if tok in {";", "&&", "||", "&", ")", "(", "|"} and (tok != "|" or depth <= 0):
                    break
                args.append(tok)
            found.append((text, args))
    return found


def check_cli(block: Block) -> list[str]:
    """What is wrong with the block's ``envengineer`` commands against the real CLI (empty: nothing)."""
    import typer

    from envengineer.cli.commands import app

    root = typer.main.get_command(app)
    problems = []
    for text, args in _commands(block.source):
        command, words, ctx = root, [], None
        rest = list(args)
        while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
            word = rest.pop(0).strip("[]")
            sub = command.commands.get(word)
            if sub is None:
                problems.append(f"{block.where}: `envengineer {' '.join(words + [word])}`: no such command (in: {text})")
                command = None
                break
            command, words = sub, words + [word]
        if command is None:
            continue
        if hasattr(command, "commands") and (not rest or rest[0] not in {"--help", "-h"}):
            problems.append(f"{block.where}: `envengineer {' '.join(words)}` needs a sub-command (in: {text})")
            continue
        opts = {"--help"}
        for param in command.params:
            if getattr(param, "param_type_name", "") == "option":
                opts.update(param.opts)
                opts.update(param.secondary_opts)
        positional = [a.strip("[]") for a in rest if not a.lstrip("[").startswith("-")]
        task_options = None
        if command.context_settings.get("ignore_unknown_options") and positional:
            task_options = _task_option_names(positional[0])
        for arg in rest:
            flag = arg.lstrip("[").rstrip("]").split("=", 1)[0]
            if not re.fullmatch(r"--?[A-Za-z][\w-]*", flag):
                continue
            if flag in opts:
                continue
            if task_options is not None and flag.startswith("--") and flag[2:].replace("-", "_") in task_options:
                continue
            problems.append(f"{block.where}: `envengineer {' '.join(words)}` has no option {flag} (in: {text})")
    return problems


def _task_option_names(task: str) -> set[str] | None:
    """The task's own options (``--KEY VALUE`` after the task), or None for a placeholder or absent task."""
    from envengineer.registry import load_registry

    try:
        options = load_registry().get("generator", task).Options
    except Exception:
        return None
    return set(getattr(options, "model_fields", {}))


# ----------------------------------------------------------------------------- the `pip` check


def pip_check(argv: list[str], cwd: Path, installs: list[Path] | None = None) -> list[str]:
    """What a documented ``pip install ARGS`` would install that is not installed here (empty: all is).

    A local folder other than the clone's root (an example plugin, a fixture package) is not checked but
    appended to ``installs``: the block installs it into the page's own folder (``DOCS_TEST_SITE``)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from envengineer.plugins.gpu.lock import same_version

    if not argv or argv[0] != "install":
        return [f"pip {' '.join(argv)}: only `pip install` is checked"]
    targets, no_deps, args, pins = [], False, list(argv[1:]), {}
    while args:
        arg = args.pop(0)
        if arg in {"-e", "--editable"}:
            targets.append(args.pop(0))
        elif arg in {"-c", "--constraint"}:  # the lock: what it pins must be installed at the pinned version
            from envengineer.plugins.gpu.lock import read_lock

            lock = (cwd / args.pop(0)).resolve()
            if not lock.is_file():
                return [f"pip install -c {lock}: no such file"]
            pins = read_lock(lock)
        elif arg == "--no-deps":
            no_deps = True
        elif arg in {"-q", "--quiet", "-U", "--upgrade", "--disable-pip-version-check"}:
            pass
        elif arg.startswith("-"):
            return [f"pip install {arg}: an option the check does not know"]
        else:
            targets.append(arg)
    missing: list[str] = []
    seen: set[tuple[str, str]] = set()

    def need(requirement: Requirement, why: str, deps: bool) -> None:
        name = canonicalize_name(requirement.name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(f"{requirement} ({why}): not installed")
            return
        if requirement.specifier and not requirement.specifier.contains(dist.version, prereleases=True):
            missing.append(f"{requirement} ({why}): {dist.version} is installed")
        if name in pins and not same_version(dist.version, pins[name]):
            missing.append(f"{requirement} ({why}): {dist.version} is installed, the lock pins {pins[name]}")
        declared = {canonicalize_name(e) for e in dist.metadata.get_all("Provides-Extra") or []}
        for extra in requirement.extras:
            if canonicalize_name(extra) not in declared:
                missing.append(f"{requirement.name}[{extra}] ({why}): {requirement.name} declares no extra {extra!r}")
        if not deps:
            return
        for extra in [""] + sorted(requirement.extras):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for line in dist.requires or []:
                sub = Requirement(line)
                env = {"extra": extra}
                if sub.marker is not None and not sub.marker.evaluate(env):
                    continue
                if sub.marker is None and extra:
                    continue  # a base requirement, checked with extra ""
                if sub.marker is not None and "extra" not in str(sub.marker) and extra:
                    continue
                need(sub, f"{requirement.name}[{extra}]" if extra else requirement.name, deps)

    for target in targets:
        if target.startswith((".", "/")) or "/" in target:
            path, _, extras = target.partition("[")
            folder = (cwd / path).resolve()
            project = _project_name(folder)
            if project is None:
                missing.append(f"{target}: {folder} has no pyproject.toml with a project name")
                continue
            if installs is not None and folder != cwd.resolve() and not extras:
                installs.append(folder)
                continue
            target = f"{project}[{extras}" if extras else project
        need(Requirement(target), target, not no_deps)
    return missing


def _project_name(folder: Path) -> str | None:
    import tomllib

    try:
        return tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"]
    except (OSError, KeyError, ValueError):
        return None


# ----------------------------------------------------------------------------- running a page


def scratch_clone(dest: Path) -> Path:
    """A fresh copy of the repository's tracked files (as in the working tree) at ``dest``."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def run_block(block: Block, cwd: Path, env: dict[str, str]) -> tuple[str, float]:
    """Run the block in ``cwd``; its merged output and wall seconds. Fails on a non-zero exit or a missing
    expected output line."""
    source = block.source
    if block.language == "console":  # `$ ` lines are the commands, the rest their output
        source = "\n".join(ln[2:] for ln in source.splitlines() if ln.startswith("$ "))
    # `pip` checks instead of installing; a failed check ends the block even inside a `&&` list
    preamble = f'pip() {{ "{sys.executable}" "{Path(__file__)}" pip-check "$@" || exit $?; }}\nset -o pipefail\n'
    seen = cwd / ".docs-test-exit"
    seen.unlink(missing_ok=True)
    if block.exit_status is None:
        preamble += "set -e\n"
    else:  # the documented status is recorded and the block goes on; any other failure ends it
        preamble += f"trap 'rc=$?; if [ $rc -eq {block.exit_status} ]; then echo $rc >> \"{seen}\"; else exit $rc; fi' ERR\n"
    start = time.monotonic()
    proc = subprocess.Popen(  # its own process group, so that a block over its time leaves nothing running
        ["bash", "-c", preamble + source], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{block.where}: still running after {BLOCK_TIMEOUT_S} s (mark it skip=long?)\n{out[-4000:]}") from None
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise AssertionError(f"{block.where}: exit {proc.returncode} after {seconds:.0f} s\n{block.source}\n--- output (tail)\n{out[-4000:]}")
    if block.exit_status is not None and not seen.exists():
        raise AssertionError(f"{block.where}: the page says a command exits {block.exit_status}, but every command succeeded\n{out[-4000:]}")
    seen.unlink(missing_ok=True)
    missing = README_COMMANDS.missing_lines(out, block.expected)  # in the page's order, each within one output line
    if missing:
        raise AssertionError(f"{block.where}: the page says the command prints (in this order)\n  {missing[0].strip()}\nbut it printed\n{out[-4000:]}")
    return out, seconds


def page_env(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["ENVENGINEER_CACHE"] = str(scratch / ".docs-test-cache")  # a fresh user's empty cache
    env["DOCS_TEST_SITE"] = str(scratch / ".docs-test-site")  # where the page's `pip install ./PKG` goes
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env["DOCS_TEST_SITE"], env.get("PYTHONPATH")]))
    env["COLUMNS"] = "80"  # rich's tables as a page quotes them
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def run_page(blocks: list[Block], scratch: Path, report: list[str] | None = None, execute: bool = True) -> None:
    """CLI-check every block, then (``execute``) run the page's unskipped shell blocks in order in ``scratch``."""
    problems = [p for b in blocks if b.language in SHELL or _is_command_list(b) for p in check_cli(b)]
    assert not problems, "documented envengineer commands the CLI does not accept:\n" + "\n".join(problems)
    runnable = [b for b in blocks if b.language in SHELL and b.skip is None]
    if not runnable or not execute:
        return
    env = page_env(scratch)
    for block in runnable:
        _, seconds = run_block(block, scratch, env)
        if report is not None:
            report.append(f"{block.where}: {seconds:.1f} s")


def _is_command_list(block: Block) -> bool:
    lines = [ln.strip() for ln in block.source.splitlines() if ln.strip()]
    return block.language == "" and bool(lines) and all(ln.startswith("envengineer ") for ln in lines)


# ----------------------------------------------------------------------------- the tests

#: pages whose run blocks take more than a few seconds (the README: its testbed and dry-run blocks; its quickstart is run by CI first, scripts/readme_commands.py)
SLOW_PAGES = {"README.md"}


#: pages whose run blocks take over ~10 CPU seconds (measured: python bench/suite_time.py --tests 40
#: tests/test_docs_commands.py -m ""): the default tier checks their commands against the CLI without running them
#: (`PAGE-cli`), the long tier runs them (docs/docs-tests.md#the-two-tiers)
LONG_PAGES = {"docs/writing-a-plugin.md", "docs/performance.md", "docs/verifiers.md", "docs/reports.md",
              "docs/reasoning-gym.md", "docs/results-cpu.md"}


def _page_params():
    for page in PAGES:
        marks = [pytest.mark.slow] if page in SLOW_PAGES else []
        if page in LONG_PAGES:
            yield pytest.param(page, False, id=f"{page}-cli", marks=marks)
            yield pytest.param(page, True, id=page, marks=[*marks, pytest.mark.long])
        else:
            yield pytest.param(page, True, id=page, marks=marks)


@pytest.mark.parametrize("page, execute", list(_page_params()))
def test_page_commands(page, execute, tmp_path, capsys):
    blocks = parse_page(ROOT / page, page)
    times: list[str] = []
    scratch = scratch_clone(tmp_path / "clone") if execute and _has_runnable(blocks) else tmp_path
    run_page(blocks, scratch, times, execute=execute)
    with capsys.disabled():
        for line in times:
            print(f"\n  docs block {line}", end="")


def _has_runnable(blocks: list[Block]) -> bool:
    return any(b.language in SHELL and b.skip is None for b in blocks)


def test_every_page_parses_and_every_skip_has_a_reason():
    counts: dict[str, int] = {}
    for page in PAGES:
        for block in parse_page(ROOT / page, page):
            if block.language in SHELL:
                key = f"skip={block.skip}" if block.skip else "run"
                counts[key] = counts.get(key, 0) + 1
    assert counts.get("run", 0) > 0
    assert set(counts) - {"run"} <= {f"skip={r}" for r in SKIP_REASONS}


def _page(tmp_path: Path, text: str) -> list[Block]:
    path = tmp_path / "page.md"
    path.write_text(text)
    return parse_page(path, "page.md")


def test_a_renamed_flag_fails_even_in_a_skipped_block(tmp_path):
    readme = (ROOT / "README.md").read_text()
    assert "--gpu-memory-gb 80" in readme
    blocks = _page(tmp_path, readme.replace("--gpu-memory-gb 80", "--gpu-memory 80"))
    broken = [b for b in blocks if "--gpu-memory 80" in b.source and b.language in SHELL]
    assert broken and all(b.skip == "gpu" for b in broken)  # the paper's block is not run, and still checked
    problems = [p for b in broken for p in check_cli(b)]
    assert any("has no option --gpu-memory " in p for p in problems), problems
    listed = [b for b in blocks if "--gpu-memory 80" in b.source and _is_command_list(b)]  # the command list too
    assert listed and any("has no option --gpu-memory " in p for b in listed for p in check_cli(b))
    assert not [p for b in _page(tmp_path, readme) if b.language in SHELL or _is_command_list(b) for p in check_cli(b)]


def test_an_unknown_verb_and_an_unknown_task_option_fail(tmp_path):
    text = "```bash\nenvengineer generat mapf-frozenlake --n 2 --output x.jsonl\n```\n\n```bash\nenvengineer generate mapf-frozenlake --n 2 --agentz 2 --output x.jsonl\n```\n"
    problems = [p for b in _page(tmp_path, text) for p in check_cli(b)]
    assert any("`envengineer generat`: no such command" in p for p in problems), problems
    assert any("has no option --agentz" in p for p in problems), problems


def test_a_changed_figure_fails_and_the_true_one_passes(tmp_path):
    """README's testbed block, copied with the figure it declares changed, fails; as written, it passes."""
    readme = (ROOT / "README.md").read_text()
    declared = "│ all   │ 400 │ 100.0% │  100.0% │      0.0% │"
    assert readme.count(declared) == 1

    def testbed(text):
        blocks = _page(tmp_path, text)
        return [b for b in blocks if b.source.startswith("envengineer generate mapf-frozenlake --n 400")]

    (tmp_path / "ok").mkdir()
    run_page(testbed(readme), tmp_path / "ok")
    (tmp_path / "bad").mkdir()
    broken = testbed(readme.replace(declared, declared.replace("100.0% │      0.0%", "99.8% │      0.0%")))
    assert broken and "99.8%" in broken[0].expected[0]
    with pytest.raises(AssertionError, match="the page says the command prints"):
        run_page(broken, tmp_path / "bad")


def test_a_failing_command_fails_the_page(tmp_path):
    page = "```bash\nenvengineer generate mapf-frozenlake --n 2 --seed 0 --output x.jsonl\nenvengineer solve mapf-frozenlake --instances missing.jsonl --output y.jsonl\n```\n"
    with pytest.raises(AssertionError, match="exit"):
        run_page(_page(tmp_path, page), tmp_path)


def test_skip_markers_are_checked(tmp_path):
    with pytest.raises(AssertionError, match="unknown docs-test marker"):
        _page(tmp_path, "<!-- docs-test: skip=slowish -->\n```bash\necho hi\n```\n")
    with pytest.raises(AssertionError, match="no block after it"):
        _page(tmp_path, "```bash\necho hi\n```\n<!-- docs-test: skip=long -->\n")
    blocks = _page(tmp_path, "<!-- docs-test: skip=gpu needs CUDA -->\n```bash\necho hi\n```\n\n```bash\necho there\n```\n")
    assert [(b.skip, b.skip_note) for b in blocks] == [("gpu", "needs CUDA"), (None, "")]


def test_pip_is_checked_not_run(tmp_path):
    assert pip_check(["install", "-e", ".[train]"], ROOT) == []
    assert pip_check(["install", "pytest>=8"], ROOT) == []
    assert any("declares no extra" in m for m in pip_check(["install", "-e", ".[trian]"], ROOT))
    assert any("not installed" in m for m in pip_check(["install", "no-such-distribution-xyz"], ROOT))
    assert any("is installed" in m for m in pip_check(["install", "pytest<1"], ROOT))
    page = "```bash\npip install -e '.[trian]' && echo never\n```\n"
    with pytest.raises(AssertionError, match="declares no extra"):
        run_page(_page(tmp_path, page), ROOT)


def test_pip_with_the_lock_checks_its_pins(tmp_path):
    """``pip install -c LOCK ...`` passes where what it installs is at the lock's versions, and names a package the
    lock pins at another version."""
    from importlib import metadata

    real = ROOT / "requirements" / "lock.txt"
    pyyaml = metadata.version("pyyaml")
    lock = tmp_path / "lock.txt"
    lock.write_text(f"pyyaml=={pyyaml}\npluggy=={metadata.version('pluggy')}\n")
    assert pip_check(["install", "-c", str(lock), "pyyaml"], ROOT) == []
    lock.write_text("pyyaml==0.0.1\n")
    assert any("the lock pins 0.0.1" in m for m in pip_check(["install", "-c", str(lock), "pyyaml"], ROOT))
    assert any("no such file" in m for m in pip_check(["install", "-c", str(tmp_path / "nope.txt"), "pyyaml"], ROOT))
    assert real.is_file()


def test_the_ci_reader_finds_the_same_readme_commands():
    """scripts/readme_commands.py (standard library, what CI runs) and this file's Sybil reader agree on the README's
    first two commands and on the table the first must print."""
    module = README_COMMANDS
    ci = module.readme_blocks((ROOT / "README.md").read_text())
    shell = [b for b in parse_page(ROOT / "README.md", "README.md") if b.language == "bash"][:2]
    assert [c for c, _ in ci] == [b.source.strip() for b in shell]
    assert ci[0][1] == shell[0].expected and ci[0][1], "the quickstart's table"
    assert all("-c requirements/lock.txt" in c for c, _ in ci), "both commands install through the lock"
    assert module.missing_lines("a\n│ x │  1 │\nb", ["│ x │ 1 │"]) == [] and module.missing_lines("b\na", ["a", "b"]) == ["b"]


def _pip_main(argv: list[str]) -> int:
    """``pip ARGS`` inside a block: check what is installed; install local packages into the page's folder
    (``--no-deps``, no build isolation: nothing is downloaded, this environment is not changed)."""
    installs: list[Path] = []
    missing = pip_check(argv, Path.cwd(), installs)
    for line in missing:
        print(f"docs test: `pip {' '.join(argv)}` would install what is missing here: {line}", file=sys.stderr)
    if missing:
        return 1
    site = os.environ.get("DOCS_TEST_SITE")
    if installs and not site:
        print("docs test: DOCS_TEST_SITE is not set: local packages are not installed", file=sys.stderr)
        return 1
    import importlib.util

    # with setuptools here the build needs nothing from the network; without it pip fetches the build backend
    offline = ["--no-build-isolation", "--no-index"] if importlib.util.find_spec("setuptools") else []
    for folder in installs:
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
               *offline, "--upgrade", "--target", site, str(folder)]
        if subprocess.run(cmd).returncode != 0:
            return 1
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["pip-check"]:
    sys.exit(_pip_main(sys.argv[2:]))


def test_the_long_pages_are_pages_and_ci_runs_the_long_tier():
    """A page renamed out of LONG_PAGES would lose its run; the long tier the README's `pytest` leaves out runs in CI."""
    assert LONG_PAGES <= set(PAGES), sorted(LONG_PAGES - set(PAGES))
    assert "python -m pytest -q -m long" in (ROOT / ".ci" / "run").read_text()
