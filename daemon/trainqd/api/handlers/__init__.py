"""The API's handlers, one module per resource, joined by one route table (jobs.py)."""
