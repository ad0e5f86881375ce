"""Instances are confined (Landlock): a compromised instance reads its own identity and nothing
else of the keystore, cannot mint identities, take the node agent over, read or signal the
processes around it, or write outside its run folder and the temporary folders."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcc.security import confine
from tests.conftest import REPO, mcc_up, running_ids, wait_for

MANIFEST = """\
mission: jail
domain: {domain}
security: on
systems:
  escape: {{app: "tests.security.escape_app:main", resources: {{cpus: 0.1}}}}
  tracker: {{app: "mcc.orchestrate.probe:idle", resources: {{cpus: 0.1}}}}
"""


@pytest.fixture
def home() -> Iterator[Path]:
    """A home outside /tmp: a folder below a writable one cannot be hidden (`apply` says so),
    and /tmp is writable for every instance."""
    folder = Path(tempfile.mkdtemp(prefix="mcc-confine-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _in_child(conf: confine.Confinement, script: str) -> dict[str, str]:
    """Run ``script`` (it fills ``out``) in a process confined by ``conf``; ``out``."""
    code = (
        "import json, os, sys\n"
        "from mcc.security import confine\n"
        "conf = confine.Confinement.from_json(sys.argv[1])\n"
        "out = {'warnings': confine.apply(conf)}\n"
        "def attempt(name, action):\n"
        "    try:\n"
        "        action(); out[name] = 'ok'\n"
        "    except OSError as exc:\n"
        "        out[name] = type(exc).__name__\n"
        f"{script}\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [os.sys.executable, "-c", code, conf.to_json()],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _writable_for(path: Path, conf: confine.Confinement) -> bool:
    """Whether ``conf`` lets a process write ``path``: a checkout in /tmp (a CI clone) is
    writable to every instance, one elsewhere is not."""
    real = os.path.realpath(path)
    return any(
        real == os.path.realpath(w) or real.startswith(os.path.realpath(w).rstrip("/") + "/")
        for w in conf.writable
    )


def test_the_kernel_has_landlock() -> None:
    """The suite runs where the guarantee is claimed: a kernel without Landlock would leave
    every instance unconfined (`apply` warns there, and the supervisor reports it)."""
    assert confine.landlock_abi() >= 1


def test_a_confined_process_reads_only_what_it_was_given(home: Path, tmp_path: Path) -> None:
    keys = home / "keystores" / "m"
    (keys / "ca").mkdir(parents=True)
    (keys / "ca" / "identity_ca.key").write_text("secret")
    (keys / "ca" / "identity_ca.pem").write_text("public")
    for name in ("me", "you"):
        (keys / "identities" / name).mkdir(parents=True)
        (keys / "identities" / name / "key.pem").write_text(name)
    run = home / "runs" / "r1"
    run.mkdir(parents=True)
    conf = confine.instance_confinement(
        home=home,
        run_dir=run,
        identity_files=[keys / "ca" / "identity_ca.pem", keys / "identities/me/key.pem"],
    )
    out = _in_child(
        conf,
        f"k = {str(keys)!r}\n"
        "attempt('ca cert', lambda: open(k + '/ca/identity_ca.pem').read())\n"
        "attempt('own key', lambda: open(k + '/identities/me/key.pem').read())\n"
        "attempt('ca key', lambda: open(k + '/ca/identity_ca.key').read())\n"
        "attempt('list ca', lambda: os.listdir(k + '/ca'))\n"
        "attempt('other key', lambda: open(k + '/identities/you/key.pem').read())\n"
        "up = f'/proc/{os.getppid()}/root'\n"
        "attempt('via proc', lambda: open(up + k + '/ca/identity_ca.key').read())\n"
        "attempt('via dotdot', lambda: open(k + '/identities/me/../you/key.pem').read())\n"
        "attempt('parent env', lambda: open(f'/proc/{os.getppid()}/environ').read())\n"
        "attempt('signal parent', lambda: os.kill(os.getppid(), 0))\n"
        "attempt('new file in home', lambda: open(k + '/../../planted', 'w'))\n"
        f"attempt('run folder', lambda: open({str(run)!r} + '/x', 'w').write('x'))\n"
        "attempt('tmp', lambda: open(f'/tmp/mcc-confine-{os.getpid()}', 'w').write('x'))\n"
        "attempt('repo', lambda: open('mcc-confine-planted', 'w'))\n"
        "attempt('etc', lambda: open('/etc/mcc-confine-planted', 'w'))\n"
        "attempt('code', lambda: open(confine.__file__, 'a'))\n"
        "attempt('dev null', lambda: open('/dev/null', 'w').write('x'))\n"
        "attempt('read etc', lambda: open('/etc/hostname').read())\n"
        "own = f'/proc/self/task/{os.getpid()}/comm'\n"  # the CUDA driver names its threads
        "attempt('own thread name', lambda: open(own, 'w').write('confined'))\n"
        "attempt('parent name', lambda: open(f'/proc/{os.getppid()}/comm', 'w').write('x'))\n"
        "attempt('sysctl', lambda: open('/proc/sys/kernel/hostname', 'w').write('x'))\n"
        "attempt('raw memory', lambda: open('/dev/mem', 'rb'))\n",
    )
    assert out.pop("warnings") == []
    allowed = {"ca cert", "own key", "run folder", "tmp", "dev null", "read etc", "own thread name"}
    allowed |= {"repo"} if _writable_for(REPO, conf) else set()
    allowed |= {"code"} if _writable_for(Path(confine.__file__), conf) else set()
    for name, got in out.items():
        assert (got == "ok") == (name in allowed), (name, got)
    assert not Path("/etc/mcc-confine-planted").exists()
    (REPO / "mcc-confine-planted").unlink(missing_ok=True)


def test_a_confined_persistence_store_commits_batches_of_large_samples(home: Path) -> None:
    """A replica of the persistence service runs confined. SQLite picks its temporary folder
    by access(2), which Landlock does not change: without a ``TMPDIR`` it chose /var/tmp, and a
    batch of large samples (a keep-last topic's oldest pruned inside the write's savepoint)
    failed its commit with "unable to open database file". The store keeps its temporary
    structures in memory, so it commits wherever it is confined."""
    run = home / "runs" / "r1"
    run.mkdir(parents=True)
    conf = confine.instance_confinement(home=home, run_dir=run)
    out = _in_child(
        conf,
        "os.environ.pop('TMPDIR', None)\n"
        "from mcc.persist.records import TopicPolicy, Write\n"
        "from mcc.persist.store import Store\n"
        f"store = Store.open({str(run / 'p.sqlite')!r})\n"
        "T = ('Checkpoint', 'mcc::Checkpoint')\n"
        "store.ensure_topic(TopicPolicy(*T, False, history_depth=16))\n"
        "def batch(r):\n"
        "    return [Write(*T, (), b'k%d' % (i % 2), '{}', 'w%d' % (i % 2), i,\n"
        "                  os.urandom(20_000)) for i in range(r * 8, r * 8 + 8)]\n"
        "try:\n"
        "    out['stored'] = sum(store.apply(batch(r)).stored for r in range(20))\n"
        "except Exception as exc:\n"
        "    out['stored'] = f'{type(exc).__name__}: {exc}'\n"
        "out['kept'] = store.usage()[0]\n",
    )
    assert out == {"warnings": [], "stored": 160, "kept": 32}


def test_a_home_inside_a_writable_folder_cannot_be_hidden(tmp_path: Path) -> None:
    """Landlock only grants: a folder inside a writable one is granted with it. The instance's
    confinement says so (the supervisor logs it once), and `apply` warns when asked anyway."""
    (tmp_path / "home").mkdir()
    conf = confine.instance_confinement(home=tmp_path / "home", run_dir=tmp_path / "run")
    assert conf.exposed == (str(tmp_path / "home"),) and "/dev" in conf.hidden
    out = _in_child(confine.Confinement(hidden=conf.exposed, writable=("/tmp",)), "")
    assert out["warnings"] == [f"{tmp_path / 'home'} is inside writable /tmp: it cannot be hidden"]


@pytest.mark.slow
def test_a_compromised_instance_of_a_secured_mission_stays_in_its_cell(
    home: Path, tmp_path: Path, bus_env: dict[str, str], domain_id: int
) -> None:
    env = {**bus_env, "MCC_HOME": str(home)}
    manifest = tmp_path / "jail.yaml"
    manifest.write_text(MANIFEST.format(domain=domain_id))
    with mcc_up(manifest, env=env, log=tmp_path / "up.log"):
        wanted = {"jail/escape/0", "jail/tracker/0"}  # the escaper beats with its own identity
        wait_for(lambda: running_ids(env) == wanted, 60, "every instance running")
        found = lambda: list((home / "runs").glob("jail-*/escape-0.json"))  # noqa: E731
        wait_for(lambda: bool(found()), 30, "the escaper's record")
        results = json.loads(found()[0].read_text())
        keystore = home / "keystores" / "jail"
        assert sorted(p.name for p in (keystore / "identities" / "jail").iterdir()) == [
            "console",
            "escape.0",
            "operator",
            "supervisor",
            "tracker.0",
        ]  # fmt: skip  (no "evil")
        # Its identity came through its agent: a 0700 folder of 0600 files, its own only,
        # which leaves with the instance (the tracker's is there too, the escaper cannot read it)
        delivered = sorted((home / "agents").glob("*.identities/jail.*"))
        assert [d.name for d in delivered] == ["jail.escape.0", "jail.tracker.0"]
        assert {oct(d.stat().st_mode & 0o777) for d in delivered} == {"0o700"}
        files = [f for d in delivered for f in d.iterdir()]
        assert {oct(f.stat().st_mode & 0o777) for f in files} == {"0o600"}
        assert not any(f.name.endswith(".key") for f in files)  # no CA private key
    assert not list((home / "agents").glob("*.identities/jail.*"))  # gone with the mission
    allowed = {"own identity", "no keystore in the environment", "write the run folder"}
    allowed |= {"write /tmp", "sqlite's temporary files"}
    if str(REPO.resolve()).startswith("/tmp/"):  # a CI clone: /tmp is every instance's
        allowed.add("write the working folder")
    (REPO / "escape-was-here").unlink(missing_ok=True)
    for name, got in results.items():
        assert (got == "ok") == (name in allowed), (name, got)
    assert "PermissionError" in results["ca key"]
