"""The fabric check: pre-checks, nccl-tests/rccl-tests runs over OpenMPI, verdicts and where a fault is."""
