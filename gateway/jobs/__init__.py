"""Scheduled work, each run claimed by one process: maintenance, scheduled reports and metric
monitors."""
