"""Session logs on Ray: the detached writer per node and the ``SessionLog`` client.

It imports the ground floor alone.
"""
