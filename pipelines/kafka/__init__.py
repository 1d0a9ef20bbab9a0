"""Kafka from the driver: watermarks and offsets (client) and the committed offsets' mirror."""
