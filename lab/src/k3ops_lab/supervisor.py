"""`python -m k3ops_lab.supervisor HOST`: keeps one lab host's container running across reboots."""

import sys

from . import container, state

if __name__ == "__main__":
    lab = state.load()
    if lab is None:
        sys.exit("k3ops lab supervisor: no lab is set up")
    sys.exit(container.supervise(lab.host(sys.argv[1])))
