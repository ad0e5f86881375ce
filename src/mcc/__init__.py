"""MCC, the mission-critical cloud."""

__version__ = "0.1.0"
