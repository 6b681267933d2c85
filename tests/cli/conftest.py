"""Fixtures of the command line's tests: the tmux screens of the REPL's (``tmux_screen``)."""

from __future__ import annotations

from .tmux_screen import screens

__all__ = ["screens"]
