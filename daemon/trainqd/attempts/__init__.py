"""Attempts: what a trainer runs in and finds (the contract, the engine, job directories),
and trainqd's side of its monitor."""
