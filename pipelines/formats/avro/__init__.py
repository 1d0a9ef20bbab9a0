"""Avro: reader and writer schemas matched, unions resolved, records decoded into columns."""
