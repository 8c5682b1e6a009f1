"""trainq's shared vocabulary: what the CLI, the Python client and trainqd all speak.

The job spec, the wire records, the states and their one transition table, the errors and
the paths. Nothing here imports the CLI, so trainqd imports this package alone of trainq's.
"""

__version__ = "0.1.0"
