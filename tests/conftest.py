"""Shared test set-up: this folder is on sys.path, so test folders import ``processes``."""
