"""Each fact's command and processing, from the cases under facts/<module>.<Fact>/ (pyinfra's format)."""

from pathlib import Path

from pyinfra_testing.facts import make_fact_tests

BASE_IMPORT_PATH = "k3ops.facts"
TESTS_BASE = Path(__file__).parent / "facts"

for fact_path in sorted(folder.name for folder in TESTS_BASE.iterdir() if folder.is_dir()):
    locals()[fact_path] = make_fact_tests(BASE_IMPORT_PATH, fact_path, TESTS_BASE / fact_path)
