"""Integrations of linattn with other libraries (imported on demand)."""
