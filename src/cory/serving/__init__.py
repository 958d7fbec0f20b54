"""Serving what the library builds: rewards over HTTP (``cory serve-reward``)."""
