"""Tests of the HTTP service, the client and the service CLI commands."""
