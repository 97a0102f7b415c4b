"""Serving backends: configs, results, profiles, policies and the simulator."""
