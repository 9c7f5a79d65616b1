"""The running lab (`k3ops lab up`) as a pyinfra inventory, grouped by hardware profile.

    pyinfra -y inventory/lab.py exec -- uname -a
"""

from k3ops.lab.inventory import groups
from k3ops.spec import validate_inventory

globals().update(groups())
validate_inventory(__file__)
