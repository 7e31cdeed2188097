"""The `ba-agent` command (`main`) and its subcommands, one module each."""
