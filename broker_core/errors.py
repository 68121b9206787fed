"""Typed operating errors: bad input, damaged stores, invalid names. One base class.

Programmer errors are assertions; these are for the world being wrong. Every error carries
where it was found (a file, an offset, a scenario line) so the CLI can print one useful line.
"""

from __future__ import annotations


class RetryAuditError(Exception):
    """Base of every operating error the tool reports to a user."""

    exit_code = 1

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        self.message = message
        self.where = where
        self.hint = hint
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return text


class BadInputError(RetryAuditError):
    """Input the user gave us is wrong (a scenario, an argument, a file that is not a store)."""

    exit_code = 2


class ScenarioError(BadInputError):
    """A scenario file failed validation; ``where`` names the file and line."""


class InvalidNameError(BadInputError):
    """A topic or group name breaks RocketMQ's naming rules (TopicValidator / Validators)."""


class CorruptRecordError(BadInputError):
    """Bytes that should hold a commit-log record, consume-queue unit or config file do not."""

    def __init__(self, message: str, *, where: str | None = None, offset: int | None = None,
                 hint: str | None = None):
        self.offset = offset
        if offset is not None and where is not None:
            where = f"{where}@{offset}"
        elif offset is not None:
            where = f"offset {offset}"
        super().__init__(message, where=where, hint=hint)


class CorruptStoreError(BadInputError):
    """A store directory is damaged in a way that strict mode (or the operation) cannot accept."""


class StoreStateError(RetryAuditError):
    """The store cannot do what was asked in its current state (closed, locked, read-only)."""


class SimulationLimitError(RetryAuditError):
    """A simulation reached one of its explicit bounds (events, messages) before finishing."""
