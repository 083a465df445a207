"""Local fake provider APIs: real HTTP servers on loopback, written from each provider's
public API reference. Each checks the request exactly (auth, JSON shape, the key),
records what it accepted, and can be told to refuse, defer, delay, or read the body
and drop the connection without answering. See :mod:`.server` for the shared parts.
"""
