"""What runs on Spark's executors: the reading tasks (read, decode, check, write) and nothing else."""
