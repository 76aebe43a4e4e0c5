"""Handlers of the server's own messages (ping, goodbye); the driver API's
handlers live in tally.server.driver."""
