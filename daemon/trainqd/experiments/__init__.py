"""Experiments: metrics that trainers report and the tuning experiments run over them."""
