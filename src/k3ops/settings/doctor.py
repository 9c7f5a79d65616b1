"""What `k3ops doctor` looks back over, and when it calls a quiet download stuck."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DoctorSpec(BaseModel):
    """The doctor's windows; its rules and thresholds live with the runbooks they point at."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    doctor_kernel_log_hours: int = Field(24, ge=1, le=24 * 30, description="how far back in the current boot the "
                                                                          "doctor reads the kernel log for Xid errors")
    doctor_fetch_stall_minutes: int = Field(30, ge=1, le=24 * 60, description="a checkpoint fetch whose progress has "
                                                                             "not moved for this long is stuck")
    doctor_generation_timeout_seconds: int = Field(
        30, ge=5, le=600, description="a ready engine that has not produced one token within this long is stuck")
