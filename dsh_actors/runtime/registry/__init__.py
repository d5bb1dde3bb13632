"""The registry: the actor that owns a registry's definitions, and the fleet it keeps.

``registry_actor`` (a thin shell over ``registry_core`` and ``registry_config``), ``fleet``
(its executor pools and scope hosts), ``scope_actor`` (agent scopes), ``approval`` (the ask
queue), ``leases`` (fleet-wide limits' leases). The highest room: it may import every other.
"""
