"""The read-only JSON API (/api/v1/) and its tokens.

Layers: ``urls`` -> ``views`` (thin: validate the query, call a selector,
serialize) -> ``serializers`` -> ``selectors`` (reads through the areas'
selectors and the stored figures). ``tokens`` holds the token services that
``auth`` and ``/metrics`` share.
"""
