"""Graph layer: graphs, their nodes and edges, clone and DOT output — pure data, no device work.

Modules: ``node_type`` (HIP's node-type enum), ``params`` (node parameters and their
validators), ``memnodes`` (memory-alloc reservations), ``node`` (``GraphNode``), ``builder``
(the ``add_*_node`` methods), ``graph`` (``Graph``), ``dot`` (DOT output). Import from the
modules themselves.
"""
