"""Platform adapters: verify and parse platform events, render replies back. Nothing
platform-specific leaks past this package."""
