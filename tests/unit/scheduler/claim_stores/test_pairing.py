"""Claim stores go with their host source; the daemon refuses other pairs."""

from __future__ import annotations

import pytest

from nova_sched import exception
from nova_sched.cmd import scheduler as cmd_scheduler
from nova_sched.conf import CONF
from nova_sched.scheduler import claim_stores


@pytest.mark.parametrize("claims,source", [("placement", "compute_reports"),
                                           ("local", "nova_cells")])
def test_mismatched_pairs_are_refused(claims, source):
    CONF.set_override("claims", claims, "scheduler")
    CONF.set_override("host_source", source, "scheduler")
    with pytest.raises(exception.ConfigurationError, match="needs host_source"):
        claim_stores.check_pairing()


def test_the_daemon_exits_2_with_the_reason(tmp_path, capsys):
    conf = tmp_path / "nova-sched.conf"
    conf.write_text("[database]\nconnection = sqlite:///%s/x.sqlite\n"
                    "[scheduler]\nclaims = placement\n" % tmp_path)
    assert cmd_scheduler.main(["--config-file", str(conf)]) == 2
    assert "claims = placement needs host_source = nova_cells" in capsys.readouterr().err


def test_nova_cells_without_the_api_database_is_refused(tmp_path, capsys):
    conf = tmp_path / "nova-sched.conf"
    conf.write_text("[database]\nconnection = sqlite:///%s/x.sqlite\n"
                    "[scheduler]\nclaims = placement\nhost_source = nova_cells\n"
                    % tmp_path)
    assert cmd_scheduler.main(["--config-file", str(conf)]) == 2
    assert "api_database_connection" in capsys.readouterr().err
