"""Quota configuration: Kafka's vocabulary, the quota file format, stores and live updates."""

from kquota.config.model import (
    PROPERTIES,
    PROPERTY_OF,
    QuotaConfig,
    QuotaEntry,
    Window,
)

__all__ = ["PROPERTIES", "PROPERTY_OF", "QuotaConfig", "QuotaEntry", "Window"]
