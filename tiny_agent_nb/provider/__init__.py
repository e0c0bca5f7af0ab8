"""OpenAI-compatible chat-completions provider over httpx (OpenRouter by default)."""

from ._types import (
    OPENROUTER_BASE_URL,
    Completion,
    ProviderConfig,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallStarted,
    ToolSchema,
    UsageReport,
)

__all__ = [
    "OPENROUTER_BASE_URL",
    "Completion",
    "ProviderConfig",
    "ProviderError",
    "ReasoningDelta",
    "StreamEvent",
    "TextDelta",
    "ToolCallStarted",
    "ToolSchema",
    "UsageReport",
]
