"""Actuators: the only code that changes the world outside kvpilot (Kubernetes nodes, Alertmanager)."""
