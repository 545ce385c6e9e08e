"""Fixtures every test folder may use."""

from tests.local_model import local_env, local_server

__all__ = ["local_env", "local_server"]
