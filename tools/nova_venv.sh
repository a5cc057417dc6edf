#!/usr/bin/env bash
# Create a virtualenv holding a real nova from PyPI, for capturing the
# primitives nova puts on the wire (tools/capture_nova_primitives.py).
#
# Usage: tools/nova_venv.sh VERSION_SPEC DIR [REQUIREMENT...]
#   VERSION_SPEC  "29.*", "34.*", "29.4.0", or a full pip specifier such as
#                 ">=29,<30" (a bare version gets "==" put in front)
#   DIR           where the venv goes, e.g. /tmp/nova-venvs/29
#   REQUIREMENT   more packages for the same venv, installed with nova so
#                 that pip resolves them together, e.g.
#                 "openstack-placement==16.*" PyMySQL (the test cloud of
#                 tests/functional/novacloud.py runs Placement from it)
#
# Idempotent: when DIR already has a nova matching VERSION_SPEC whose
# objects import, and every REQUIREMENT is installed and matches, nothing
# is installed. Always prints the nova version.
#
# Environment:
#   PYTHON                    interpreter for the venv (default: python3)
#   NOVA_VENV_CONSTRAINTS     optional pip constraints file (e.g. an OpenStack
#                             upper-constraints.txt) for nova's dependencies
#   NOVA_VENV_ONLY_BINARY     comma separated packages to take as wheels only
#                             (":all:" for all); used when an sdist fails
set -euo pipefail

say() { echo "nova_venv: $*" >&2; }

if [ "$#" -lt 2 ]; then
    echo "usage: $0 VERSION_SPEC DIR [REQUIREMENT...]" >&2
    exit 2
fi

SPEC=$1
DIR=$2
shift 2
EXTRAS=("$@")
PYTHON=${PYTHON:-python3}

case "$SPEC" in
    [0-9]*) SPEC="==$SPEC" ;;
esac
REQ="nova$SPEC"

# Prints the installed nova version and exits 0 when DIR's nova matches SPEC,
# every extra requirement is installed and matches, and nova.objects
# registers; exits non-zero otherwise.
nova_ok() {
    [ -x "$DIR/bin/python" ] || return 1
    "$DIR/bin/python" - "$SPEC" "${EXTRAS[@]}" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
try:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
v = version("nova")
if v not in SpecifierSet(sys.argv[1]):
    sys.exit(1)
for extra in sys.argv[2:]:
    req = Requirement(extra)
    if version(req.name) not in req.specifier:
        sys.exit(1)
import nova.objects
nova.objects.register_all()
print(v)
EOF
}

if installed=$(nova_ok); then
    say "$DIR already has nova $installed ($REQ${EXTRAS[*]:+ ${EXTRAS[*]}}); nothing to do"
    echo "$installed"
    exit 0
fi

if [ ! -x "$DIR/bin/python" ]; then
    say "creating venv $DIR"
    "$PYTHON" -m venv "$DIR"
fi

pip_args=(install --quiet --upgrade)
if [ -n "${NOVA_VENV_CONSTRAINTS:-}" ]; then
    pip_args+=(--constraint "$NOVA_VENV_CONSTRAINTS")
fi
if [ -n "${NOVA_VENV_ONLY_BINARY:-}" ]; then
    pip_args+=(--only-binary "$NOVA_VENV_ONLY_BINARY")
fi

start=$(date +%s)
# Older novas (29 and before at least) import pkg_resources, which
# setuptools dropped in 81.
"$DIR/bin/python" -m pip install --quiet --upgrade pip wheel "setuptools<81" \
    2> >(grep -v '^WARNING: Location' >&2)
say "installing $REQ${EXTRAS[*]:+ ${EXTRAS[*]}} into $DIR"
# The grep drops the noise of a local find-links/extra-index set-up that
# lists no such package.
if ! "$DIR/bin/python" -m pip "${pip_args[@]}" "$REQ" "${EXTRAS[@]}" "setuptools<81" \
        2> >(grep -v '^WARNING: Location' >&2); then
    say "plain install failed; retrying with wheels preferred"
    "$DIR/bin/python" -m pip "${pip_args[@]}" --prefer-binary "$REQ" "${EXTRAS[@]}" "setuptools<81" \
        2> >(grep -v '^WARNING: Location' >&2)
fi
say "pip took $(( $(date +%s) - start ))s"

if ! installed=$(nova_ok); then
    say "nova installed but nova.objects does not import, or a requirement is missing; see:"
    "$DIR/bin/python" -c 'import nova.objects; nova.objects.register_all()' || true
    exit 1
fi
echo "$installed"
