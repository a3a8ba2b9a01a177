"""The operators' streaming path of incident 003: NATS JetStream in front, line monitors, archiver.

See docs/streaming.md for the two paths, the subjects and streams, the message format and scale-out.
"""
