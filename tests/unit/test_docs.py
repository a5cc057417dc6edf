"""The docs under doc/ against the code they describe.

* Every method the daemon exposes over RPC has a ``### `name``` section in
  the methods part of doc/rpc-api.md, and every such section names a method
  that exists and is exposed. The endpoints are the ones the daemon really
  serves: ``SchedulerService.start`` is run against a throw-away database
  with its topic consumer replaced by a recorder, so an endpoint added there
  (a 4.x one beside the 2.10 one, say) is checked without editing this test.
* Every relative link in doc/*.md and README.md leads to an existing file.
* Every ``[group] option`` the operator guide names is a real option of
  nova-sched, oslo.messaging or oslo.log (the namespaces of the sample
  configuration's generator).
"""

from __future__ import annotations

import inspect
import pathlib
import re
import sys
from typing import Any, Iterable

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "doc"
RPC_API = DOC / "rpc-api.md"
OPERATOR_GUIDE = DOC / "operator-guide.md"
# The part of rpc-api.md whose level-3 headings are RPC methods: from this
# level-2 heading to the next level-2 heading.
METHODS_SECTION = "## Methods"

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_METHOD_HEADING = re.compile(r"^###[ \t]+`([A-Za-z_][A-Za-z0-9_]*)`[ \t]*$", re.M)
# [text](target) and ![alt](target), with an optional "title".
_INLINE_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target (reference definitions).
_REFERENCE_LINK = re.compile(r"^[ \t]{0,3}\[[^\]\n]+\]:[ \t]*<?(\S+?)>?(?:[ \t]+.*)?$",
                             re.M)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_OPTION = re.compile(r"\[([A-Za-z_][A-Za-z0-9_]*)\][ \t]+([A-Za-z_][A-Za-z0-9_]*)")


def _without_fences(text: str) -> str:
    return _FENCE.sub("", text)


# -- RPC methods ------------------------------------------------------------------
def is_exposed(function: Any) -> bool:
    """Whether oslo.messaging's ``@expose`` marked ``function``."""
    return bool(getattr(function, "exposed", False))


def exposed_methods(endpoint: Any) -> set[str]:
    """Names of the endpoint's methods an RPC client may call."""
    cls = endpoint if inspect.isclass(endpoint) else type(endpoint)
    return {name for name, member in inspect.getmembers(cls, callable)
            if not name.startswith("_") and is_exposed(member)}


def _flatten(values: Iterable[Any]) -> Iterable[Any]:
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _flatten(value)
        else:
            yield value


@pytest.fixture
def served_endpoints(db, monkeypatch):
    """The endpoint objects a started SchedulerService hands to its consumer."""
    import oslo_messaging as messaging

    from nova_sched import rpc
    from nova_sched import service as service_module

    handed: list[Any] = []

    class RecordingConsumer:
        def __init__(self, *args, **kwargs):
            handed.extend(_flatten(list(args) + list(kwargs.values())))

        def start(self):
            pass

        def stop(self, *args, **kwargs):
            pass

    monkeypatch.setattr(service_module, "TopicConsumer", RecordingConsumer)
    # Should the daemon move to oslo.messaging's own server, record that too.
    monkeypatch.setattr(rpc, "get_server",
                        lambda *args, **kwargs: RecordingConsumer(*args, **kwargs))
    monkeypatch.setattr(messaging, "get_rpc_server",
                        lambda *args, **kwargs: RecordingConsumer(*args, **kwargs))
    # The daemon's own publishers read the rabbit driver's options, which
    # the driver registers when a transport of it is made (no connection
    # yet): without this the test passed only after another test made one.
    rpc.get_transport().cleanup()
    transport = messaging.get_rpc_transport(rpc.CONF, url="fake:")
    switch_interval = sys.getswitchinterval()
    service = service_module.SchedulerService(transport=transport,
                                              notification_transport=transport)
    try:
        service.start()
    finally:
        service.stop()
        sys.setswitchinterval(switch_interval)
    endpoints = [obj for obj in handed
                 if not inspect.isclass(obj) and exposed_methods(obj)]
    assert endpoints, ("SchedulerService.start served no endpoint with exposed "
                       "methods; has the way it builds its RPC server changed?")
    return endpoints


def documented_methods() -> list[str]:
    """The ``### `name``` headings of rpc-api.md's methods section, in order."""
    text = _without_fences(RPC_API.read_text(encoding="utf-8"))
    start = text.find(f"\n{METHODS_SECTION}\n")
    assert start >= 0, f"{RPC_API.name} has no '{METHODS_SECTION}' section"
    end = text.find("\n## ", start + 1)
    section = text[start:] if end < 0 else text[start:end]
    return _METHOD_HEADING.findall(section)


def test_oslo_expose_marks_functions_as_this_test_expects():
    import oslo_messaging as messaging

    def method(self):
        pass

    assert not is_exposed(method)
    assert is_exposed(messaging.expose(method))


def test_every_exposed_method_is_documented(served_endpoints):
    exposed = set().union(*(exposed_methods(e) for e in served_endpoints))
    documented = set(documented_methods())
    missing = sorted(exposed - documented)
    assert not missing, (
        f"RPC methods exposed by the daemon but not documented in "
        f"doc/rpc-api.md (add a '### `name`' section under "
        f"'{METHODS_SECTION}'): {missing}")


def test_every_documented_method_is_exposed(served_endpoints):
    exposed = set().union(*(exposed_methods(e) for e in served_endpoints))
    documented = documented_methods()
    assert documented, "doc/rpc-api.md documents no RPC method"
    unknown = sorted(set(documented) - exposed)
    assert not unknown, (
        f"doc/rpc-api.md documents methods the daemon does not expose: {unknown}")


def test_exposed_methods_are_those_the_access_policy_allows(served_endpoints):
    """The attribute this test reads is the one oslo.messaging's dispatcher
    checks: the daemon's server uses ExplicitRPCAccessPolicy."""
    import oslo_messaging as messaging

    policy = messaging.ExplicitRPCAccessPolicy()
    for endpoint in served_endpoints:
        for name in exposed_methods(endpoint):
            assert policy.is_allowed(endpoint, name), name


def test_the_methods_section_is_found_and_ignores_other_headings():
    """The compute cast and notifications sit outside the methods section
    (or under headings of another form) and are not taken for methods."""
    documented = documented_methods()
    assert len(documented) == len(set(documented)), \
        f"a method is documented twice: {documented}"
    assert "run_instance" in documented


# -- links --------------------------------------------------------------------------
def _markdown_files() -> list[pathlib.Path]:
    return sorted(DOC.glob("*.md")) + [ROOT / "README.md"]


def relative_links(text: str) -> list[str]:
    """Targets of the links and images of a Markdown text that are paths."""
    text = _without_fences(text)
    text = _CODE_SPAN.sub("", text)
    targets = _INLINE_LINK.findall(text) + _REFERENCE_LINK.findall(text)
    found = []
    for target in targets:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith(("#", "//")):
            continue  # http:, https:, mailto:, an anchor in the same page
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path:
            found.append(path)
    return found


def test_relative_link_parser():
    text = ("See [a](doc/x.md#part), ![img](images/c.png \"title\"), "
            "[web](https://example.com/), [here](#anchor), `[no](code.md)`\n"
            "```\n[no](fenced.md)\n```\n[ref]: other.md\n")
    assert relative_links(text) == ["doc/x.md", "images/c.png", "other.md"]


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_existing_files(path):
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing")
    broken = []
    for target in relative_links(path.read_text(encoding="utf-8")):
        resolved = (path.parent / target).resolve()
        if ROOT not in resolved.parents and resolved != ROOT:
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)} links to missing files: {broken}"


# -- options -------------------------------------------------------------------------
def known_options() -> set[tuple[str, str]]:
    """(group, name) of every option in the sample configuration's namespaces,
    deprecated names included (an old name still works)."""
    from oslo_log import _options as log_options
    import oslo_messaging.opts as messaging_opts

    from nova_sched.conf import opts as nova_sched_opts

    known: set[tuple[str, str]] = set()
    for lister in (nova_sched_opts.list_opts, messaging_opts.list_opts,
                   log_options.list_opts):
        for group, options in lister():
            group_name = getattr(group, "name", group) or "DEFAULT"
            for opt in options:
                known.add((group_name, opt.name))
                for old in opt.deprecated_opts:
                    known.add((old.group or group_name, old.name or opt.name))
    # oslo.log names some options with dashes ("log-file"); a configuration
    # file spells them with underscores, as oslo.config accepts.
    return known | {(group, name.replace("-", "_")) for group, name in known}


def mentioned_options(text: str) -> set[tuple[str, str]]:
    """Every ``[group] name`` (group and name on one line) in the text,
    ini blocks left out (there a group stands on a line of its own)."""
    return set(_OPTION.findall(_without_fences(text)))


def test_option_mention_parser():
    text = ("Set `[scheduler] workers` and [DEFAULT] transport_url; a "
            "[link](x.md) is none.\n```ini\n[database]\nconnection = x\n```\n")
    assert mentioned_options(text) == {("scheduler", "workers"),
                                       ("DEFAULT", "transport_url")}


def test_operator_guide_names_only_real_options():
    mentioned = mentioned_options(OPERATOR_GUIDE.read_text(encoding="utf-8"))
    assert mentioned, "the operator guide names no option"
    unknown = sorted(f"[{g}] {n}" for g, n in mentioned - known_options())
    assert not unknown, f"the operator guide names options that do not exist: {unknown}"
