"""The one error type for problems with what a user asked for, and the exit codes.

:class:`UsageError` is raised for an unknown variant, family or switch, a bad shape, a backend this
machine cannot run; the CLI prints its first line and exits 2. Anything else that escapes is a bug:
the CLI shows its traceback and exits :data:`EXIT_INTERNAL` (3), never 1, which means "verification
failed". It is a ``ValueError``, so library callers that catch ``ValueError`` keep working.
"""

#: A correctness check failed (verify: an output mismatch or a hazard).
EXIT_FAILED = 1
#: A user error: one line on stderr.
EXIT_USAGE = 2
#: A bug (an exception that is not a user error): its traceback on stderr.
EXIT_INTERNAL = 3


class UsageError(ValueError):
    """A problem with what the user asked for; printed as one line, exit status 2."""
