"""Loopback fakes of external services, speaking their wire protocols."""
