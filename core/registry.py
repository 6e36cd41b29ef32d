"""Name -> class registries for pluggable parts (simulator policies, engine clients).

One small helper so every registry refuses the same mistakes the same way: a class without a
name, two classes under one name, and a lookup of a name nobody registered (the error lists the
names there are, since the name usually comes from a command line or a config file).
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Classes of one kind by their `name` attribute."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.entries: dict[str, type[T]] = {}

    def register(self, cls: type[T]) -> type[T]:
        """Class decorator: file `cls` under `cls.name` (ValueError if unnamed or already taken)."""
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} class needs a non-empty string `name`; {cls.__name__} has none")
        if name in self.entries and self.entries[name] is not cls:
            raise ValueError(f"{self.kind} {name!r} is already registered ({self.entries[name].__name__})")
        self.entries[name] = cls
        return cls

    def get(self, name: str) -> type[T]:
        """The class registered under `name`; ValueError listing the known names otherwise."""
        try:
            return self.entries[name]
        except KeyError:
            known = ", ".join(sorted(self.entries)) or "none registered"
            raise ValueError(f"unknown {self.kind} {name!r}; known: {known}") from None
