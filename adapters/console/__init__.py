"""A local terminal 'platform', for trying the agent without Slack or Feishu."""
