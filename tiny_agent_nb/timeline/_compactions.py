"""Each compaction of a session, in the one description every surface uses."""

from __future__ import annotations

from dataclasses import dataclass

from ..session import CompactionEntry, SessionState
from ..words import compaction_words, summary_tokens


@dataclass(frozen=True)
class CompactionRow:
    """One compaction entry of the file, as `words.compaction_words` says it."""

    entry_id: str
    attempt_id: str | None  # the attempt that wrote it (None: written before they were named)
    words: str


def compactions(state: SessionState) -> list[CompactionRow]:
    """Every compaction in file order: how many entries it summarized since the previous
    cut (entries, not earlier compactions, as the compaction counted them), its summary's
    size and the context's size before and after it."""
    entries = state.entries
    ids = [i for i in entries if entries.type_of(i) == "compaction"]
    if not ids:
        return []  # the common case costs one pass over the entry types
    position: dict[str, int] = {}  # entries (not compactions) up to and including each
    count = 0
    for entry_id in entries:
        if entries.type_of(entry_id) != "compaction":
            count += 1
        position[entry_id] = count
    rows: list[CompactionRow] = []
    previous_cut = 0
    for entry_id in ids:
        body = entries[entry_id].entry
        assert isinstance(body, CompactionEntry)
        cut = position.get(body.throughEntryId, previous_cut)
        covered = max(0, cut - previous_cut)
        previous_cut = max(cut, previous_cut)
        size = summary_tokens(body.summary)
        words = compaction_words(covered, size, body.tokensBefore, body.tokensAfter)
        rows.append(CompactionRow(entry_id, body.attemptId, words))
    return rows


def compaction_notes(state: SessionState) -> dict[str, str]:
    """Per attempt that wrote a compaction: `words.compaction_words` of it."""
    return {c.attempt_id: c.words for c in compactions(state) if c.attempt_id is not None}
