"""The one error type for problems with what a user asked for.

:class:`UsageError` is raised for an unknown variant, family or switch, a bad shape, a backend this
machine cannot run; the CLI prints its first line and exits 2. Anything else that escapes is a bug
and shows its traceback. It is a ``ValueError``, so library callers that catch ``ValueError`` keep
working.
"""


class UsageError(ValueError):
    """A problem with what the user asked for; printed as one line, exit status 2."""
