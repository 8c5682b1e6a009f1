"""The `trainq` command's flags: one module per concern, each command a typer function that
turns its flags into the `argparse.Namespace` trainq.commands runs. `trainq.cli` puts them
in one typer application, in the order `trainq --help` lists them."""
