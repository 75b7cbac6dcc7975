"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""


class UserError(Exception):
    """Bad input: a task that does not exist, a file that cannot be read, a bad option."""


class TaskError(UserError):
    """The task itself is broken: its harness fails, or its reference kernel does."""
