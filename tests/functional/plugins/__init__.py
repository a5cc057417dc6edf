"""Plugins the functional tests load into the daemons by dotted name."""
