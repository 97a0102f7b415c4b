"""Goodput search and the Optuna study over serving configs, and export of the best one."""
