"""The model's context window: what a server says when a request does not fit it, the
window its model listing reports, and an estimate of a request's tokens.

No HTTP client here (`_client` asks `GET {base}/models`); nothing imports httpx.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._types import ProviderError

if TYPE_CHECKING:
    from ._wire import Encoded

# How each server words "the request does not fit the context window" (status 400 unless
# said otherwise), as collected from their answers:
#   OpenAI     {"error": {"message": "This model's maximum context length is 8192 tokens.
#              However, your messages resulted in 8227 tokens. Please reduce the length of
#              the messages.", "type": "invalid_request_error", "param": "messages",
#              "code": "context_length_exceeded"}}  (crewAIInc/crewAI-examples#121,
#              ChatGPTNextWeb/NextChat#2358; older: "..., however you requested 4231 tokens
#              (3975 in your prompt; 256 for the completion)", hwchase17/chat-your-data#10)
#   vLLM       {"error": {"message": "This model's maximum context length is 4096 tokens.
#              However, you requested 4120 tokens (...)" or "... and your request has 2778
#              input tokens (8000 > 4096 - 2778)", "type": "BadRequestError", "code": 400}}
#              (quoted in andrewcho-dev/opsconductor-ng vLLM_transition/TOKEN_LIMIT_FIX.md)
#   llama.cpp  {"error": {"code": 400, "message": "request (4476 tokens) exceeds the
#              available context size (4096 tokens)", "type": "exceed_context_size_error",
#              "n_prompt_tokens": 4476, "n_ctx": 4096}}  (llama-server, tools/server)
#   Ollama     truncates the prompt silently by default (its log alone says "truncating
#              input prompt": ollama/ollama#9452, #10368), so nothing can be classified and
#              the model simply forgets the start; where it refuses instead it says "input
#              length exceeds maximum context length" or "input exceeds context length"
#              (ITSpecialist111/ai_automation_suggester#37)
#   OpenRouter passes the upstream message on with code 400, sometimes inside a 200 body:
#              "This endpoint's maximum context length is 131072 tokens. However, you
#              requested about 141607 tokens (...). Please reduce the length of either one,
#              or use the "middle-out" transform ..."  (Aider-AI/aider#3721)
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_WORDS = re.compile(
    r"maximum context length|context[ _]length[ _]exceeded"
    r"|exceeds? (?:the )?(?:maximum |available )?context (?:length|size|window)",
    re.IGNORECASE,
)


def is_context_length(error: object, said: str | None) -> bool:
    """Whether an error answer says the conversation is too long for the model.

    `error`: the answer's `error` object (or the whole body) when it was JSON; `said`:
    its message, or the body's text when it was not JSON."""
    if isinstance(error, Mapping):
        for value in (error.get("code"), error.get("type")):
            if isinstance(value, str) and value in _CONTEXT_CODES:
                return True
    return said is not None and _CONTEXT_WORDS.search(said) is not None


def context_too_long(said: str, status: int | None) -> ProviderError:
    """Not retryable: the same request fails the same way until the context is smaller."""
    where = f"HTTP {status}" if status is not None else "in its answer"
    return ProviderError(
        f"The conversation is too long for the model's context window ({where}: {said}). "
        "The session file is unchanged. Compact it (%agent compact), start a new session "
        "(%agent new), or choose a model with a larger context window.",
        kind="contextLength",
        retryable=False,
        status=status,
    )


def estimate_tokens(messages: Sequence[Encoded]) -> int:
    """An estimate of the tokens `messages` (encoded wire messages) take: one per 4 bytes.

    Only an estimate, for servers that report no usage: English prose runs about 4 bytes
    per token, code and JSON fewer, CJK text more (3 bytes per character, about one
    token each), so it can be off by a factor of 2 either way."""
    return (sum(len(message) for message in messages) + 3) // 4


# Where each server's `GET /models` puts the window (`data[]` entries matched by `id`):
#   OpenRouter  `context_length`              (openrouter.ai/docs, API reference: models)
#   vLLM        `max_model_len`               (vllm entrypoints/openai ModelCard)
#   llama.cpp   `meta.n_ctx_train`: the window the model was trained with; the server's
#               own `--ctx-size` may be smaller, and it then answers exceed_context_size
#   Ollama      none on /v1/models (its window is the num_ctx option): None
_WINDOW_FIELDS: tuple[tuple[str, ...], ...] = (
    ("context_length",),
    ("max_model_len",),
    ("meta", "n_ctx_train"),
)


def window_in_listing(raw: bytes, model: str) -> int | None:
    """The context window of `model` in a `GET /models` answer, or None when the answer
    is not a listing, does not list the model, or gives no window for it."""
    try:
        listing: Any = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    data = listing.get("data") if isinstance(listing, Mapping) else None
    if not isinstance(data, list):
        return None
    for entry in data:
        if not isinstance(entry, Mapping) or entry.get("id") != model:
            continue
        for path in _WINDOW_FIELDS:
            value: Any = entry
            for key in path:
                value = value.get(key) if isinstance(value, Mapping) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None
    return None
