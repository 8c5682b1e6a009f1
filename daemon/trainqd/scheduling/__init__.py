"""Scheduling: the loop, starting attempts, their ends, stops, and the jobs' lifecycle
around them."""
