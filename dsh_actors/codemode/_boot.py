"""The first lines of every trusted sandbox entry point (``_launcher.py``, ``_forkserver.py``).

``ctypes.util.find_library`` runs ``ldconfig -p`` in a subprocess (milliseconds per call,
and impossible once the walls are up): the host resolved the libraries once and passes
their paths, which this patches in before ``landlockpy`` and ``pyseccomp`` load.
"""

import ctypes.util


def prepare(config):
    known = config["sonames"]
    find = ctypes.util.find_library
    ctypes.util.find_library = lambda name: known.get(name) or find(name)
