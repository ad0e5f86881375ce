"""Container hosts for trying MCC as a cluster on one machine, and the images they run.

- :mod:`mcc.lab.podman`: podman with the flags and configuration this project runs it with (the
  one place that holds them; ``python -m mcc.lab podman ARGS``).
- :mod:`mcc.lab.images`: the images of deploy/ on a Debian base made without any registry
  (``make images``).
- :mod:`mcc.lab.hosts`: :class:`ContainerLab`, N containers of the core image on a podman bridge,
  each with its own filesystem, hostname, address and ``$MCC_HOME``; stale labs removed.

    python -m mcc.lab images            # make images
    python -m mcc.lab podman ps -a      # podman with those flags
    python -m mcc.lab up 3 --name demo  # h1 h2 h3, their addresses
    python -m mcc.lab list | down demo | clean
"""

from mcc.lab.hosts import ContainerLab, LabHost, cleanup_stale
from mcc.lab.podman import PodmanError, podman

__all__ = ["ContainerLab", "LabHost", "PodmanError", "cleanup_stale", "podman"]
