"""kforge: the KernelForge command line. Talks to the REST API over HTTP only.

It imports nothing from the server's packages (webapp/, agents/, harness/, ...), so it can be
installed on any CI runner: `pip install -e .` gives the `kforge` command.
"""

__version__ = "0.1.0"
