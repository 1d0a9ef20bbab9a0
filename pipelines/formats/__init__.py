"""Record formats: JSON, the Schema Registry's framing, Avro, Protobuf and JSON Schema decoders."""
