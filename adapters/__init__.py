"""Platform adapters: verify and parse platform events, render replies back. Nothing
platform-specific leaks past this package: each platform is a plugin behind the contract in
`adapters.base`, listed in `adapters.registry`."""
