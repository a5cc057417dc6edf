"""Every shell script in the repository parses (bash -n) and passes shellcheck.

The scripts are found rather than listed, so that a new one is linted too:
files ending in .sh, files whose #! line names a shell, and devstack/settings
(sourced by devstack, so it has no #! line). shellcheck comes from Debian's
``shellcheck`` package, which run_tests.sh installs; without it the
shellcheck tests are skipped, saying so.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Trees that hold no scripts of the project's own.
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".pytest_cache"}
_SHEBANG = re.compile(rb"^#!\s*\S*/(?:env\s+)?(?:ba|da|k)?sh\b")

# devstack sources these into its own bash process rather than running them.
DEVSTACK = {"devstack/plugin.sh", "devstack/settings"}
# Checks that cannot hold for a devstack plugin:
# SC2034: settings assigns variables only plugin.sh and devstack read.
# SC1090, SC1091: anything sourced comes from devstack's tree, which is not
# here for shellcheck to follow.
DEVSTACK_EXCLUDES = "SC2034,SC1090,SC1091"

# The scripts the project ships today: discovery must find at least these.
KNOWN = {
    "run_tests.sh",
    ".ci/run",
    "tools/ensure_cluster_packages.sh",
    "tools/ensure_databases.sh",
    "tools/ensure_rabbitmq.sh",
    "tools/generate_config_sample.sh",
    "devstack/plugin.sh",
    "devstack/settings",
    "bench/run_all.sh",
}


def _is_script(path: pathlib.Path) -> bool:
    if path.suffix == ".sh":
        return True
    with path.open("rb") as f:
        return bool(_SHEBANG.match(f.readline()))


def _scripts() -> list[str]:
    found = set(DEVSTACK)
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if any(part in _SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts):
            continue
        if path.is_file() and not path.is_symlink() and _is_script(path):
            found.add(rel.as_posix())
    return sorted(found)


SCRIPTS = _scripts()


def test_discovery_finds_the_known_scripts():
    assert KNOWN <= set(SCRIPTS)
    # Python and data files must not be mistaken for shell.
    assert not [s for s in SCRIPTS if s.endswith((".py", ".toml", ".md"))]


@pytest.mark.parametrize("script", SCRIPTS)
def test_bash_parses(script):
    proc = subprocess.run(
        ["bash", "-n", script], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_shellcheck(script):
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip(
            "shellcheck is not installed (Debian package 'shellcheck'; "
            "./run_tests.sh installs it)"
        )
    # --norc: a developer's ~/.shellcheckrc must not change the verdict.
    cmd = [shellcheck, "--norc", "--format=gcc"]
    if script in DEVSTACK:
        # settings has no #! line and plugin.sh is sourced by bash.
        cmd += ["--shell=bash", f"--exclude={DEVSTACK_EXCLUDES}"]
    proc = subprocess.run(
        [*cmd, script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
