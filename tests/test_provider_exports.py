"""The provider's public surface is what its __all__ says."""

from __future__ import annotations

from tiny_agent_nb import provider


def test_provider_exports_are_complete_and_public() -> None:
    exported = set(provider.__all__)
    assert all(hasattr(provider, name) for name in exported)
    assert {
        "Provider",
        "ProviderConfig",
        "ProviderError",
        "Completion",
        "UsageReport",
        "backoff_delay",
    } <= exported
    public = {n for n in vars(provider) if not n.startswith("_")}
    assert public - exported == set(), "public names missing from __all__"
