"""README.md as a new user reads it: every link and file it names exists, every `mcc.*` name it
gives imports, every `mcc` command of its table is a command, its Python runs, and every command
of its shell blocks runs, in order, against the missions it starts (shortened by --duration)."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcc.cli import build_parser
from tests.conftest import REPO, wait_for

README = REPO / "README.md"
TEXT = README.read_text()
TOP_LEVEL = {p.name for p in REPO.iterdir()}
FOLLOW_S = 5.0  # how long `mcc logs -f` is followed before it is stopped
MISSION_S = 120  # --duration given to a README `mcc up` that has none: no mission outlives the test


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int


def blocks() -> list[Block]:
    found = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", TEXT, re.S | re.M):
        found.append(Block(m[1], m[2], TEXT.count("\n", 0, m.start()) + 1))
    return found


def shell_commands(block: Block) -> list[str]:
    commands = []
    for raw in block.text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()  # a comment, whole-line or trailing
        if line:
            commands.append(line)
    return commands


def test_readme_has_what_this_test_reads() -> None:
    langs = [b.lang for b in blocks()]
    assert langs.count("bash") >= 3 and langs.count("python") >= 2, langs


def test_links_and_paths_exist() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", TEXT)
    assert links, "README links nothing"
    for target in links:
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        assert (REPO / target.split("#")[0]).exists(), f"README links {target}, which is missing"
    for quoted in re.findall(r"`([^`\s]+)`", TEXT) + re.findall(r"\b(docs/[\w.-]+\.md)\b", TEXT):
        first = quoted.split("/")[0]
        if "/" not in quoted or first not in TOP_LEVEL or "<" in quoted:
            continue
        for path in expand_braces(quoted.rstrip(".,:;")):
            assert list(REPO.glob(path)), f"README names {quoted}: {path} does not exist"


def expand_braces(text: str) -> Iterator[str]:
    m = re.search(r"\{([^{}]*)\}", text)
    if m is None:
        yield text
        return
    for choice in m[1].split(","):
        yield from expand_braces(text[: m.start()] + choice + text[m.end() :])


def test_python_names_exist() -> None:
    names = set(re.findall(r"`(mcc(?:\.\w+)+)`", TEXT))
    assert names, "README names no mcc module"
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attr in parts[cut:]:
                assert hasattr(obj, attr), f"README names {name}: no {attr!r} in {obj!r}"
                obj = getattr(obj, attr)
            break
        else:
            pytest.fail(f"README names {name}, which does not import")


def test_the_command_table_names_real_commands() -> None:
    table = TEXT[TEXT.index("## The `mcc` command") :].split("\n## ", 1)[0]
    commands = []
    for cell in re.findall(r"^\| (`mcc .*?) \|", table, re.M):
        for span in re.findall(r"`mcc ([^`]+)`", cell):
            segments = span.replace("\\|", "|").split(" / ")
            words = command_words(segments[0])
            commands.append(words)
            for other in segments[1:]:
                commands.append([*words[:-1], *command_words(other)[:1]])
    assert len(commands) >= 30, commands
    for words in commands:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
            build_parser().parse_args([*words, "--help"])
        assert exit_.value.code == 0, f"`mcc {' '.join(words)}` is not a command"


def command_words(text: str) -> list[str]:
    """The sub-command path: the words before an option or a PLACEHOLDER."""
    words = []
    for word in text.split():
        if word.startswith("-") or not re.fullmatch(r"[a-z][a-z0-9-]*", word):
            break
        words.append(word)
    return words


def test_python_blocks(bus_env: dict[str, str]) -> None:
    python = [b for b in blocks() if b.lang == "python"]
    tour, app = python[0], python[1]
    proc = subprocess.run(
        [sys.executable, "-c", tour.text],
        cwd=REPO,
        env=bus_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"README.md:{tour.line}: {proc.stdout}{proc.stderr}"
    assert "track_id=1" in proc.stdout, proc.stdout  # the reader got the sample back
    compile(app.text, f"README.md:{app.line}", "exec")
    from mcc.orchestrate.runtime import AppContext

    assert "AppContext" in app.text and callable(AppContext)


def test_make_targets_exist() -> None:
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    named = set(re.findall(r"`make (\w+)`", TEXT))
    for block in blocks():
        if block.lang == "bash":
            named |= {c.split()[1] for c in shell_commands(block) if c.startswith("make ")}
    assert {"demo", "test"} <= named
    assert named <= targets, f"README names make targets the Makefile lacks: {named - targets}"
    demo = re.search(r"^demo:.*\n\t(.+)$", makefile, re.M)
    assert demo and "mcc demo" in demo[1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_shell_command_runs(tmp_path: Path, bus_env: dict[str, str]) -> None:
    env = {**bus_env, "MCC_HOME": str(tmp_path / "home"), "COLUMNS": "160"}
    ran = 0
    for block in blocks():
        if block.lang != "bash":
            continue
        mission, log = None, tmp_path / f"block-{block.line}.log"
        try:
            for command in shell_commands(block):
                argv = shlex.split(command)
                if argv[0] == "make":
                    continue  # test_make_targets_exist
                assert argv[0] == "mcc", (
                    f"README.md:{block.line}: `{command}` is not an mcc or make command; "
                    "this test cannot check it"
                )
                where = f"README.md:{block.line}: {command}"
                if argv[1] == "up":
                    mission = start_mission(argv, env, log, where)
                elif "-f" in argv or "--follow" in argv:
                    follow(argv, env, where)
                else:
                    proc = mcc(argv, env, where)
                    assert proc.returncode == 0, f"{where}: exit {proc.returncode}\n{proc}"
                ran += 1
            if mission is not None:
                mission.wait(60)  # `mcc down` was the block's last command
                assert mission.returncode == 0, log.read_text()
        finally:
            if mission is not None and mission.poll() is None:
                mission.kill()
                mission.wait(10)
    assert ran >= 9


def mcc(argv: list[str], env: dict[str, str], where: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "mcc.cli", *argv[1:]],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{where}: timed out\n{exc.stdout}\n{exc.stderr}")


def start_mission(
    argv: list[str], env: dict[str, str], log: Path, where: str
) -> subprocess.Popen[str]:
    args = argv[1:]
    if "--duration" not in args:
        args += ["--duration", str(MISSION_S)]
    mission_name = Path(argv[2]).stem
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcc.cli", *args, "--quiet"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def running() -> bool:
        assert proc.poll() is None, f"{where}: exited {proc.returncode}\n{log.read_text()}"
        status = mcc(["mcc", "status", "--mission", mission_name], env, where)
        return status.returncode == 0 and "running" in status.stdout

    wait_for(running, 90, f"{where}: the mission running")
    return proc


def follow(argv: list[str], env: dict[str, str], where: str) -> None:
    """`mcc logs … -f` prints the log and keeps following it until stopped."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcc.cli", *argv[1:]],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + FOLLOW_S
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{where}: exited {proc.returncode}: {proc.stderr.read()}"
            time.sleep(0.2)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert out.strip(), f"{where}: printed nothing\n{err}"
