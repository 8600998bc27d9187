"""``Patch``: one replaced attribute of a TF/Keras module or class, with
its original kept so that uninstalling restores the very object TF defined.

Invariant: while installed, ``owner.<attr>`` is the replacement built from
the original; ``uninstall`` puts the original back (for a class, its own
``__dict__`` entry, so a staticmethod or property returns as it was; an
attribute the class inherited is deleted again, so it inherits it). A
patch installed twice is installed once.
"""
import functools
import threading
import warnings
from typing import Any, Callable, Optional

from hbcore_tf._patches import internals

_lock = threading.RLock()


class Patch:
    """One attribute of one owner (module or class) that hbcore replaces.

    Args:
        owner: returns the module or class (called at install, so nothing
            is imported before the patch is needed).
        attr: the attribute's name.
    """

    def __init__(self, owner: Callable[[], Any], attr: str) -> None:
        self._owner = owner
        self.attr = attr
        self._installed: Optional[tuple] = None  # (owner, original, own)

    @property
    def installed(self) -> bool:
        """Whether the replacement is in place."""
        return self._installed is not None

    def original(self) -> Any:
        """The attribute as TF defines it (the owner's own entry)."""
        if self._installed is not None:
            return self._installed[1]
        owner = self._owner()
        if isinstance(owner, type) and self.attr in owner.__dict__:
            return owner.__dict__[self.attr]
        return getattr(owner, self.attr)  # inherited by a class: its base's

    def install(self, make: Callable[[Any], Any]) -> bool:
        """Sets ``owner.attr = make(original)`` unless already installed.

        Args:
            make: builds the replacement from the original.

        Returns:
            True when this call installed it.
        """
        if self._installed is not None:  # fast path, checked again below
            return False
        with _lock:
            if self._installed is not None:
                return False
            owner = self._owner()
            original = self.original()
            own = not isinstance(owner, type) or self.attr in owner.__dict__
            replacement = make(original)
            setattr(owner, self.attr, replacement)
            self._installed = (owner, original, own)
            return True

    def uninstall(self) -> None:
        """Restores the original (no-op when not installed)."""
        with _lock:
            if self._installed is None:
                return
            owner, original, own = self._installed
            if own:
                setattr(owner, self.attr, original)
            else:  # the class inherited it: inherit again
                delattr(owner, self.attr)
            self._installed = None


def calling_after(after: Callable[[Any], None]) -> Callable[[Any], Any]:
    """A ``make`` for ``Patch.install`` on ``__init__``: runs the original,
    then ``after(self)``."""
    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            after(self)
        return __init__
    return make


def calling_after_new(after: Callable[[Any], None]) -> Callable[[Any], Any]:
    """A ``make`` for ``Patch.install`` on ``__new__`` (a staticmethod):
    runs the original, then ``after(obj)``."""
    def make(original: Any) -> Any:
        fn = (original.__func__ if isinstance(original, staticmethod)
              else original)

        def __new__(klass, *args, **kwargs):
            obj = fn(klass, *args, **kwargs)
            after(obj)
            return obj
        return staticmethod(__new__)
    return make


def of(entry: Any) -> Patch:
    """The Patch of an internals entry (its owner resolved at install).

    Args:
        entry: a hbcore_tf._patches.internals.Internal.
    """
    return Patch(entry.owner, entry.attr)


def optional_target_present(entry: Any, lost: str) -> bool:
    """Whether an optional package's target can be patched.

    Args:
        entry: a hbcore_tf._patches.internals.Internal.
        lost: what users lose without the patch, and what to do instead
            (the warning's text).

    Returns:
        False without a warning when the target's package is not installed
        (nothing to patch); False with a RuntimeWarning naming ``lost``
        when the package is installed but renamed the target; else True.
    """
    try:
        return internals.loaded_or_none(entry) is not None
    except internals.InternalMissing as exc:
        warnings.warn("hbcore: %s (%s)" % (lost, exc), RuntimeWarning,
                      stacklevel=3)
        return False
