"""Lifetime layer: user objects and the references graphs and executables hold on them.

Import from the modules themselves (``from ..lifetime.user_object import UserObject``).
"""
