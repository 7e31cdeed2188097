"""Slack: Events API over HTTP via slack-bolt, replies via slack-sdk."""
