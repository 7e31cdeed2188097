"""Slack: Events API over HTTP or Socket Mode via slack-bolt, replies via slack-sdk.

`platform.SlackPlatform` is the plugin the gateway registers; `config.SlackConfig` its
SLACK_* settings; `app.SlackAdapter` the running adapter it builds.
"""
