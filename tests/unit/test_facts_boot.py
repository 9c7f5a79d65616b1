"""GrubDefaultCommandLine against the shell: the words it reads are the ones grub-mkconfig gets by sourcing the file."""

import subprocess

import pytest

from k3ops.facts.boot import GRUB_DEFAULTS, GrubDefaultCommandLine
from k3ops.facts.util import kernel_words

GRUB_FILES = {
    "debian": 'GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n',
    "ubuntu_edited": (
        '#GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n'
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash iommu=pt pci=realloc=off"\n'
        "GRUB_CMDLINE_LINUX='console=tty0 console=ttyS0,115200n8'  # serial console\n"
    ),
    "reassigned": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX_DEFAULT=quiet\\ iommu=pt\n',
    "no_command_line": "GRUB_DEFAULT=0\n",
}


def sourced(path, variable):
    """The variable's words after the shell sources the file, as grub-mkconfig does."""
    script = f'. "$1"; if [ "${{{variable}+set}}" = set ]; then echo "${variable}"; else echo unset; fi'
    value = subprocess.run(["sh", "-c", script, "sh", path], capture_output=True, text=True, check=True).stdout
    return None if value == "unset\n" else kernel_words(value)


@pytest.mark.parametrize("name", sorted(GRUB_FILES))
def test_grub_command_line_is_what_the_shell_reads(tmp_path, name):
    path = tmp_path / "grub"
    path.write_text(GRUB_FILES[name])
    command = GrubDefaultCommandLine.command.replace(GRUB_DEFAULTS, str(path))
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    fact = GrubDefaultCommandLine().process(output.splitlines())
    for variable in ("GRUB_CMDLINE_LINUX_DEFAULT", "GRUB_CMDLINE_LINUX"):
        assert fact.get(variable) == sourced(path, variable)
