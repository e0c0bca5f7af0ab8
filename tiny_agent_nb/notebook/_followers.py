"""What follows a kernel's open session commit by commit: its displays. They must let
go of a store the kernel switches away from, or a display would keep drawing a file the
kernel left. Displays follow "the current session" (so `%agent new`/`session` keep them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..session import Fact, SessionStore

Watcher = Callable[[Sequence[Fact]], None]

log = logging.getLogger(__name__)


class SessionFollowers:
    def __init__(self) -> None:
        self._watchers: list[Watcher] = []
        self._unfollow_store: Callable[[], None] | None = None

    def follow(self, store: SessionStore) -> None:
        """Tell the displays of `store`'s commits from now on, and that it is current."""
        self._unfollow_store = store.subscribe(self.tell)
        self.tell(())

    def unfollow(self) -> None:
        """Let go of the current store: its commits unheard."""
        if self._unfollow_store is not None:
            self._unfollow_store()
            self._unfollow_store = None

    def watch(self, watcher: Watcher) -> Callable[[], None]:
        """Call `watcher(facts)` after each commit to the current session, whichever
        it is, and `watcher(())` when this kernel switches or closes its session.
        Returns unwatch."""
        self._watchers.append(watcher)

        def unwatch() -> None:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

        return unwatch

    def forget_watchers(self) -> None:
        self._watchers.clear()

    def tell(self, facts: Sequence[Fact]) -> None:
        for watcher in list(self._watchers):
            try:
                watcher(facts)
            except Exception:
                # A display that fails must not fail the commit, the run or the switch
                # it was told about: the facts are durable already.
                log.exception("timeline display %r failed", watcher)
