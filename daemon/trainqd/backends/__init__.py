"""Back ends other than the local monitors."""
