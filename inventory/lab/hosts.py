"""The running lab (`k3ops lab up`) as a pyinfra inventory, grouped by hardware profile.

    pyinfra -y inventory/lab/hosts.py exec -- uname -a

It has a directory of its own so that pyinfra, which reads group data beside an inventory file, never
applies the example production fleet's inventory/group_data to the lab's groups.
"""

from k3ops.inventory import validate_inventory
from k3ops_lab.inventory import groups

globals().update(groups())
validate_inventory(__file__)
