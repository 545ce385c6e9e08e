"""The synthetic society back-end (``--backend sim``): see :mod:`core.team.society`."""

from core.team.society import DEFAULT_PRESET, PRESETS, SimBackend, SocietyConfig, get_preset

__all__ = ["DEFAULT_PRESET", "PRESETS", "SimBackend", "SocietyConfig", "get_preset"]
