"""nova-compute with this folder's fake drivers loadable as ``compute_driver``.

nova loads ``compute_driver`` as ``nova.virt.<name>`` only, so a driver
from outside nova's tree cannot be named in nova.conf. Run with the nova
venv's python instead of ``nova-compute`` (same arguments): nova's entry
module is imported first, as the console script does, so that nova's own
start-up (its monkey-patching choice) happens before anything else; then
the driver modules beside this file (on ``sys.path`` as the script's
folder), ``provider_tree_drivers`` and ``move_drivers``, are registered
under ``nova.virt`` and nova-compute's ``main()`` runs unchanged.
"""

import sys

from nova.cmd import compute  # noqa: I100 (first, as nova-compute's script)

import move_drivers
import provider_tree_drivers

sys.modules["nova.virt.provider_tree_drivers"] = provider_tree_drivers
sys.modules["nova.virt.move_drivers"] = move_drivers

if __name__ == "__main__":
    sys.argv[0] = "nova-compute"
    sys.exit(compute.main())
