"""How a rolling driver upgrade takes a host out of service and brings it back (`k3ops upgrade`).

The site's load balancer is reached by commands of its own, run on the controller: a list of words (no shell)
in which a word `{host}` or `{address}` stands for the inventory name or the address peers reach the host on.
Placeholders are whole words, so a value is never spliced into a word a shell or a tool would parse further.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..forms import network_address, plain

PLACEHOLDERS = ("{host}", "{address}")
BRACED = re.compile(r"\{[^}]*\}")


def command_words(words: list[str] | None) -> list[str] | None:
    """A command as words: one line each, and no `{...}` but the placeholders (a typo would reach the balancer)."""
    if words is None:
        return None
    if not words or not words[0]:
        raise ValueError("give the command as a list of words, the program first (e.g. ['lbctl', 'drain', '{host}'])")
    for word in words:
        plain(word)
        braced = BRACED.findall(word)
        unknown = [found for found in braced if found not in PLACEHOLDERS]
        if unknown:
            raise ValueError(f"{word!r}: {unknown[0]} is not a placeholder; use {' or '.join(PLACEHOLDERS)}")
        if braced and word not in PLACEHOLDERS:
            raise ValueError(f"{word!r}: a placeholder must be a word of its own (['lbctl', 'drain', "
                             f"'{braced[0]}']), never inside a word a shell or the tool would parse")
    return words


class UpgradeSpec(BaseModel):
    """A rollout's drain, soak and failure handling, per host (group data usually)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    upgrade_lb_deregister_command: list[str] | None = Field(
        None, description="controller command (words; {host}, {address}) that stops the site's load balancer "
                          "sending the host new requests; unset: no balancer, the engine stop is the drain")
    upgrade_lb_register_command: list[str] | None = Field(
        None, description="controller command (words; {host}, {address}) that puts the host back behind the "
                          "load balancer once it has passed validation")
    upgrade_lb_status_command: list[str] | None = Field(
        None, description="controller command (words; {host}, {address}) that exits 0 while the load balancer sends "
                          "the host requests: a serving host it says is out was taken out by hand, and the rollout "
                          "counts it out of service and never touches or re-admits it; unset: not asked")
    upgrade_lb_settle_seconds: float = Field(
        15, ge=0, le=600, description="wait after deregistering, for the balancer to stop sending before the drain")
    upgrade_drain_timeout_seconds: int = Field(
        600, ge=0, le=6 * 3600, description="how long the drain waits for requests running and waiting to reach "
                                             "zero (the engine's metrics; unreadable counts as busy) before "
                                             "stopping the engine anyway")
    upgrade_soak_seconds: int = Field(
        300, ge=0, le=24 * 3600, description="after rejoining, how long a group must keep serving, checked, "
                                             "before the rollout counts it done (and moves past the canary)")
    upgrade_soak_max_misses: int = Field(
        3, ge=1, le=100, description="checks in a row a soaking host may fail to answer before its group fails; "
                                     "fewer are a transient miss (a slow answer, a blip), logged and forgiven")
    upgrade_rollback_failed_canary: bool = Field(
        False, description="a canary group that fails validation is moved back to the driver it ran and, if "
                           "that validates, returned to service")

    @field_validator("upgrade_lb_deregister_command", "upgrade_lb_register_command", "upgrade_lb_status_command")
    @classmethod
    def _words(cls, value: list[str] | None) -> list[str] | None:
        return command_words(value)

    @model_validator(mode="after")
    def _both_or_neither(self) -> UpgradeSpec:
        """A host deregistered by one command must be put back by the other: one without the other would leave
        every upgraded host out of the balancer, or register hosts it never took out."""
        given = {name for name in ("upgrade_lb_deregister_command", "upgrade_lb_register_command")
                 if getattr(self, name) is not None}
        if len(given) == 1:
            missing = ({"upgrade_lb_deregister_command", "upgrade_lb_register_command"} - given).pop()
            raise ValueError(f"{given.pop()} is set but {missing} is not: set both, or neither")
        if self.upgrade_lb_status_command is not None and not given:
            raise ValueError("upgrade_lb_status_command is set but the balancer's deregister and register commands "
                             "are not: a host the rollout takes out would read as taken out by hand")
        return self

    def lb_command(self, which: str, host: str, address: str) -> list[str] | None:
        """The deregister, register or status command for one host, each placeholder word replaced by its value,
        which is a host name or an address (never an option: neither starts with `-`)."""
        words = {"deregister": self.upgrade_lb_deregister_command, "register": self.upgrade_lb_register_command,
                 "status": self.upgrade_lb_status_command}[which]
        if words is None:
            return None
        values = {"{host}": network_address(host), "{address}": network_address(address)}
        return [values.get(word, word) for word in words]
