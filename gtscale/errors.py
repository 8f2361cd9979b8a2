"""Errors that the command line reports as one line and exit status 2 (bad input, not a bug)."""


class UserError(Exception):
    """Bad input: a missing or malformed file, an unknown name, a bad option.

    The message names the file, record or key; the CLI prints it as one line and exits 2.
    """


EXIT_USER_ERROR = 2
#: Ended by Ctrl-C (SIGINT): 128 + the signal's number, as a shell reports it.
EXIT_INTERRUPTED = 130
