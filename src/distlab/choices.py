"""String choices of a config: validated once by the schema, and printed as the word the user wrote.

A plain ``(str, Enum)`` member formats as ``Guidance.frozen`` in f-strings and log lines on Python 3.11,
so every message naming a setting would need ``.value``; this base prints ``frozen``.
"""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
