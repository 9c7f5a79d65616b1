"""Each operation's commands and no-op reasons, from the cases under operations/<module>.<op>/ (pyinfra's format)."""

from pathlib import Path

from pyinfra_testing.operations import make_operation_tests

BASE_IMPORT_PATH = "k3ops.operations"
TESTS_BASE = Path(__file__).parent / "operations"

for operation_path in sorted(folder.name for folder in TESTS_BASE.iterdir() if folder.is_dir()):
    locals()[operation_path] = make_operation_tests(BASE_IMPORT_PATH, operation_path, TESTS_BASE / operation_path)
