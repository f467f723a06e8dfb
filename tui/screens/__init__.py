"""Screens of the wizard, one per module, each with its ``.tcss``."""
