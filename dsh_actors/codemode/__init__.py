"""Code Mode: the model writes a Python program that calls tools as async functions.

``runtime`` is the code-runtime seam and its sandboxed subprocess backend; ``sdk``
renders the ``tools`` stub the model reads; ``transport`` builds the reserved
``run_code`` tool and its dispatch bridge. No Ray here.
"""
