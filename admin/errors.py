"""What can go wrong in an admin command, each with the exit code it ends the command with."""

from __future__ import annotations

from protocol.errors import ErrorCode

#: Exit codes of ``kcoord groups`` and ``kcoord offsets`` (documented in docs/cli.md).
EXIT_OK = 0
EXIT_BROKER_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_GROUP_STATE = 4


class AdminError(Exception):
    """A failure the command reports in one message and turns into its exit code."""

    exit_code = EXIT_BROKER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BrokerError(AdminError):
    """The broker answered with an error code."""

    exit_code = EXIT_BROKER_ERROR

    def __init__(self, message: str, code: int | None = None) -> None:
        if code is not None:
            message = f"{message}: {error_name(code)}"
        super().__init__(message)
        self.code = code


class UsageError(AdminError):
    """Bad options or bad input (a file, a duration, a partition list)."""

    exit_code = EXIT_USAGE


class UnreachableError(AdminError):
    """No broker could be reached, or one stopped answering."""

    exit_code = EXIT_UNREACHABLE


class GroupStateError(AdminError):
    """The group is not in the state the operation needs (for example it still has members)."""

    exit_code = EXIT_GROUP_STATE


def error_name(code: int) -> str:
    """Kafka's name for an error code, e.g. ``NON_EMPTY_GROUP (68)``."""
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error code {code}"
