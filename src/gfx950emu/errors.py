"""The errors the emulator raises: one clear sentence naming the line, never a deep traceback.

(:class:`~gfx950emu.hazards.HazardError` lives with the hazard report it carries.)
"""


class ParseError(ValueError):
    """The assembly text could not be understood (message names the line)."""


class DecodeError(ValueError):
    """An instruction, operand or modifier the emulator does not implement."""


class ExecError(ValueError):
    """A run-time condition the emulator refuses to guess about."""


class MemoryFault(ValueError):
    """A global access hit an address no argument buffer covers."""
