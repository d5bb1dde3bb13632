"""Shipped examples: episodes, a workspace template, a tool plugin."""
