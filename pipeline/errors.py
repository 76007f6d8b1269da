"""Errors a user can act on. Each message is one line naming the culprit and the fix; the CLI
prints it without a traceback and exits non-zero, and the MLflow run is marked FAILED."""


class PipelineError(Exception):
    exit_code = 2


class ConfigError(PipelineError):
    """A bad key, value or combination in the composed config."""


class DataError(PipelineError):
    """Malformed or missing input data (names the file and line)."""


class GpuError(PipelineError):
    """No usable GPU, a CUDA failure, or a size that does not fit on the device."""
    exit_code = 3


class VerificationError(PipelineError):
    """A result disagreed with the reference: its time does not count."""
    exit_code = 4


def require(cond: bool, key: str, value, allowed: str) -> None:
    """Raise a one-line ConfigError naming the key, the value and what is allowed."""
    if not cond:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")
