"""How long the controller waits on a host that stopped answering, before it gives that host up.

Without a limit a host whose link dies mid-command holds every other host of the run: pyinfra runs each
operation on all hosts and waits for the slowest, and a TCP connection with unanswered data waits about
15 minutes before the kernel gives up on it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ConnectionSpec(BaseModel):
    """Keepalives on the SSH connection and the silence after which a host counts as lost (and fails, while
    the others go on)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ssh_keepalive_seconds: int = Field(
        10, ge=1, le=300, description="probe the SSH connection (TCP keepalive) after this many seconds without traffic")
    ssh_lost_after_seconds: int = Field(
        60, ge=10, le=3600,
        description="a host whose SSH connection goes unanswered this long is lost: its run fails, the others go on")

    @model_validator(mode="after")
    def _keepalive_within_limit(self) -> ConnectionSpec:
        if self.ssh_keepalive_seconds >= self.ssh_lost_after_seconds:
            raise ValueError(f"ssh_keepalive_seconds: {self.ssh_keepalive_seconds} must be shorter than "
                             f"ssh_lost_after_seconds ({self.ssh_lost_after_seconds}), or a lost host is "
                             "never noticed in time")
        return self
