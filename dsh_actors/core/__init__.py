"""The pure semantic layer: JSON rules, schemas, decisions, views and the pipeline.

Nothing in this package imports ``ray``; a test makes ``ray`` unimportable and imports
every module here to keep it that way.
"""
