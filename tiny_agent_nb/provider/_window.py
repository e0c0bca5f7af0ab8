"""The model's context window: what a server says when a request does not fit it (and
the numbers its words give), and the window its metadata reports.

No HTTP client here (`_client` asks the server); nothing imports httpx.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from ..session import MAX_WINDOW, MIN_WINDOW
from ._text import get_path, parsed
from ._types import ProviderError

# How each server words "the request does not fit the context window" (400 unless said):
#   OpenAI, vLLM, llama-cpp-python's server, OpenRouter (passing the upstream's on, at
#     times inside a 200 body): "This model's maximum context length is 8192 tokens.
#     However, your messages resulted in 8227 tokens" / "you requested 4120 tokens (3120
#     in the messages, 1000 in the completion)" / "your request has 2778 input tokens";
#     OpenAI's code "context_length_exceeded" (vllm serving_engine.py `_validate_input`,
#     llama_cpp/server/errors.py, Aider-AI/aider#3721)
#   llama.cpp  "request (4476 tokens) exceeds the available context size (4096 tokens)",
#     type "exceed_context_size_error" with `n_prompt_tokens` and `n_ctx` members; "input
#     (N tokens) is larger than the max context size (M tokens)" (tools/server)
#   llama-cpp-python the library's "Requested tokens (1203) exceed context window of
#     1024"; in a stream, already answered 200, it ends with no event (`empty_stream`)
#   Ollama cuts an over-long prompt silently (ollama/ollama#9452), caught by its usage
#     (agent/_window.py); where it refuses: "input exceeds context length", no number
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_WORDS = re.compile(
    r"maximum context length|context[ _]length[ _]exceeded"
    r"|exceeds? (?:the )?(?:maximum |available )?context (?:length|size|window)"
    r"|larger than the max context size",
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


def context_too_long(
    said: str, status: int | None, error: object = None, *, full: str | None = None
) -> ProviderError:
    """Not retryable: the same request fails the same way until the context is smaller.
    It carries the window and the request's input tokens when the answer states them (`error`:
    the answer's error object, whose llama.cpp fields are read; `full`: its whole text,
    when `said` is cut short)."""
    where = f"HTTP {status}" if status is not None else "in its answer"
    window, prompt_tokens = context_numbers(error, full if full is not None else said)
    return ProviderError(
        # What happened only: the loop compacts and retries, and a surface that shows the
        # failure says what to do next (the kind, contextLength, is the reason).
        f"The conversation is too long for the model's context window ({where}: {said}). "
        "The session file is unchanged.",
        kind="contextLength",
        retryable=False,
        status=status,
        window=window,
        prompt_tokens=prompt_tokens,
    )


# The numbers are untrusted text: only a plain count of at most 9 digits, in a plausible
# range (MIN_WINDOW..MAX_WINDOW: a smaller "window" is a misreading), is believed. A count
# goes on past a comma followed by a digit: "1,000,000,000,000" is not read as 1,000,000.
_COUNT = r"(\d{1,3}(?:,\d{3}){1,2}|\d{1,9})(?!,?\d)"
_WINDOW_WORDS = (
    re.compile(r"maximum context length is " + _COUNT, re.IGNORECASE),  # OpenAI, vLLM, ...
    re.compile(r"available context size \(" + _COUNT + r" tokens?\)", re.IGNORECASE),
    re.compile(r"max context size \(" + _COUNT + r" tokens?\)", re.IGNORECASE),
    re.compile(r"exceed context window of " + _COUNT, re.IGNORECASE),  # llama-cpp-python
)
# The input alone, never a total with the completion's max_tokens (OpenRouter's can be
# the whole window): it calibrates the estimate of a request's tokens.
_PROMPT_WORDS = (
    re.compile(r"\(" + _COUNT + r" (?:in the messages|in your prompt|of text input)", re.I),
    re.compile(r"resulted in " + _COUNT + r" tokens", re.IGNORECASE),  # OpenAI
    re.compile(r"request has " + _COUNT + r" input tokens", re.IGNORECASE),  # vLLM
    re.compile(r"\brequest \(" + _COUNT + r" tokens?\)", re.IGNORECASE),  # llama.cpp
    re.compile(r"requested tokens \(" + _COUNT + r"\)", re.IGNORECASE),  # llama-cpp-python
)


def context_numbers(error: object, said: str | None) -> tuple[int | None, int | None]:
    """The window and the refused request's input tokens (as the server counted them) a
    "too long" answer states, None where it does not: llama.cpp's `n_ctx` and
    `n_prompt_tokens` members, else the first number each wording gives."""
    window = prompt = None
    if isinstance(error, Mapping):
        window = plausible_window(error.get("n_ctx"))
        prompt = _count(error.get("n_prompt_tokens"))
    text = said or ""
    if window is None:
        found = (plausible_window(_number(p.search(text))) for p in _WINDOW_WORDS)
        window = next((w for w in found if w is not None), None)
    if prompt is None:
        counted = (_count(_number(p.search(text))) for p in _PROMPT_WORDS)
        prompt = next((n for n in counted if n is not None), None)
    return window, prompt


def plausible_window(value: object) -> int | None:
    """`value` when it is an integer (not a bool) between MIN_WINDOW and MAX_WINDOW."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if MIN_WINDOW <= value <= MAX_WINDOW else None
    return None


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_WINDOW * 10:
        return value
    return None


def _number(match: re.Match[str] | None) -> int | None:
    return None if match is None else int(match.group(1).replace(",", ""))


# Where each server states the window of the model it serves:
#   OpenRouter `GET /models` `context_length`; vLLM the same, `max_model_len`
#   llama.cpp  `GET /props` (beside /v1) `default_generation_settings.n_ctx`, the window
#     it serves; its /models has only `meta.n_ctx_train` (trained; --ctx-size may be less)
#   Ollama     `GET /api/ps` (beside /v1) `models[].context_length` of a loaded model
#   llama-cpp-python none (its refusal says it)
_LISTED: tuple[tuple[str, ...], ...] = (("context_length",), ("max_model_len",))
# Seconds the answers of all three may take together: a window is only a hint, asked
# before the first request of a kernel, and a cell must not wait long for it.
METADATA_SECONDS = 5.0
TRAINED = ("meta", "n_ctx_train")


class Listed(NamedTuple):
    """A window a listing gives, and whether it is the served one or only the trained one."""

    window: int
    trained: bool


def window_in_listing(raw: bytes, model: str) -> Listed | None:
    """The context window of `model` in a `GET /models` answer, or None when the answer
    is not a listing, does not list the model, or gives no plausible window for it."""
    data = get_path(parsed(raw), "data")
    if not isinstance(data, list):
        return None
    for entry in data:
        if not isinstance(entry, Mapping) or entry.get("id") != model:
            continue
        for path in (*_LISTED, TRAINED):
            window = plausible_window(get_path(entry, *path))
            if window is not None:
                return Listed(window, trained=path == TRAINED)
        return None
    return None


def window_in_props(raw: bytes) -> int | None:
    """llama.cpp's `GET /props`: the window its slots serve."""
    return plausible_window(get_path(parsed(raw), "default_generation_settings", "n_ctx"))


def window_in_ps(raw: bytes, model: str) -> int | None:
    """Ollama's `GET /api/ps`: the window of `model` when it is loaded (else None)."""
    models = get_path(parsed(raw), "models")
    for entry in models if isinstance(models, list) else ():
        if isinstance(entry, Mapping) and model in (entry.get("name"), entry.get("model")):
            return plausible_window(entry.get("context_length"))
    return None
