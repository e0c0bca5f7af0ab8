"""The public surface is what __all__ says, and every name in it exists."""

from __future__ import annotations

import tiny_agent_nb
from tiny_agent_nb import session


def test_session_exports_are_complete_and_public() -> None:
    exported = set(session.__all__)
    for name in exported:
        assert hasattr(session, name), name
    assert {
        "SessionStore",
        "load_session",
        "new_id",
        "SessionState",
        "SessionError",
        "SessionCorruptError",
        "SessionLockedError",
        "InvalidTransactionError",
        "NotASessionError",
        "HeaderInit",
    } <= exported
    assert not [name for name in exported if name.startswith("_")]
    public = {n for n in vars(session) if not n.startswith("_")}
    assert public - exported == set(), "public names missing from __all__"


def test_package_has_a_version() -> None:
    assert tiny_agent_nb.__version__
