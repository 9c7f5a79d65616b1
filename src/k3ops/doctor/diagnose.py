"""One host's diagnosis: the checks that apply to it, run in order over one SSH session, read-only."""

from __future__ import annotations

from ..inventory import SshTarget, selected
from ..remote import on_targets
from .checks import HostSpecs, checks_for
from .findings import Diagnosis, merged


# nvidia-smi hangs on a GPU that is failing (GSP timeouts, a GPU off the bus): the very host being diagnosed.
# A command silent for this long (beyond the generation probe's own wait) is reported, and the rest go on.
COMMAND_TIMEOUT_SECONDS = 60


class CountingHost:
    """A RemoteHost that asks each question once (several checks read nvidia-smi's report) and counts the
    commands it sends: the doctor's cost per host, for the benchmark. A question that failed (a hung nvidia-smi)
    fails again for the next check at once, not after another timeout."""

    def __init__(self, host):
        self.host, self.commands, self.answers = host, 0, {}

    def get_fact(self, fact_class, **arguments):
        key = (fact_class, repr(sorted(arguments.items())))
        if key not in self.answers:
            self.commands += 1
            try:
                self.answers[key] = self.host.get_fact(fact_class, **arguments)
            except Exception as error:  # noqa: BLE001  (each check reports it as its own, as it would have)
                self.answers[key] = error
        if isinstance(self.answers[key], Exception):
            raise self.answers[key]
        return self.answers[key]


def diagnose(host, specs: HostSpecs) -> Diagnosis:
    host.command_timeout = COMMAND_TIMEOUT_SECONDS + specs.settings.doctor.doctor_generation_timeout_seconds
    counted = CountingHost(host)
    diagnosis = Diagnosis(host=specs.name)
    found, driver_answers = [], True
    for check in checks_for(specs):
        name = check.name
        if check.needs_driver and not driver_answers:
            diagnosis.unchecked.append(f"{name}: not checked while the GPU driver does not answer")
            continue
        try:
            result = check.run(counted, specs)
        except Exception as error:  # noqa: BLE001  (a tool's odd answer or a hung command: say so, check the rest)
            diagnosis.unchecked.append(f"{name}: {type(error).__name__}: {error}")
            continue
        for finding in result.findings:
            finding.check = name
        found += result.findings
        diagnosis.notes += result.notes
        diagnosis.maintenance = diagnosis.maintenance or result.maintenance
        driver_answers = driver_answers and result.driver_answers
    diagnosis.findings = merged(found)
    diagnosis.commands = counted.commands
    return diagnosis


def run_doctor(inventory_path: str, limit: list[str] | None = None, data: dict | None = None) -> list[Diagnosis]:
    """Every selected host's diagnosis, all hosts at once; bad inventory data stops it before any connection
    (`data`: overrides every host's, as `pyinfra --data`)."""
    hosts = selected(inventory_path, limit, data)
    fleet = [(member.name, member.data.dict()) for member in hosts[0].inventory] if hosts else []
    specs = {host.name: HostSpecs.of(host.name, host.data.dict(), fleet) for host in hosts}
    results = on_targets([SshTarget.of(host) for host in hosts], lambda remote: diagnose(remote, specs[remote.name]))
    return [result.value if result.error is None else Diagnosis(host=result.host, error=result.error)
            for result in results]
