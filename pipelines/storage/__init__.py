"""Object storage under the sinks: the S3 settings every client takes from the environment, and the pre-flight
probe that names a wrong endpoint, keys, bucket or permission before a batch commits anything."""
