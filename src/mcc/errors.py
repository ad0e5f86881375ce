"""The MCC exception hierarchy: one root, subclasses named by cause.

Messages say what failed, where (file, field, value) and how to fix it.
"""


class MccError(Exception):
    """Root of every error MCC raises on purpose."""


class IdlError(MccError):
    """The IDL data model cannot be parsed or does not match the generated types."""


class QosError(MccError):
    """A QoS profile is unknown, or the profile library cannot be loaded."""


class SampleError(MccError, ValueError):
    """A sample was refused at the writer: NaN/inf, wrong array length, unknown enum value."""


class TopicError(MccError):
    """A topic name is unknown, or it is already bound to a different type."""


class TransportError(MccError):
    """A transport configuration is invalid."""


class ManifestError(MccError, ValueError):
    """A mission manifest is invalid; ``problems`` has one line per error (file:line: path: ...)."""

    def __init__(self, message: str, *, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


class OrchestratorError(MccError):
    """The orchestrator cannot do what was asked (no capacity, unknown system, backend failure)."""


class RequestTimeoutError(MccError, TimeoutError):
    """A request got no reply before its deadline."""


class WriteTimeoutError(MccError, TimeoutError):
    """A reliable write stayed refused by flow control (a reader that does not take) too long."""


class PeerLostError(MccError):
    """The peer that should answer is gone."""


class ComputeError(MccError, ValueError):
    """A numerical kernel got invalid input (shape, NaN, parameter out of range) or no backend."""


class ScenarioError(MccError, ValueError):
    """A scenario file is unreadable, not YAML, or breaks the schema (docs/scenario.md)."""


class StoreError(MccError):
    """A persistence store is unusable (not MCC's, wrong version, corrupt) or refused a sample."""


class HpcError(MccError):
    """An HPC job cannot run (bad parameter, no MPI, a worker that never came) or failed."""
