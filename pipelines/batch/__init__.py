"""One batch end to end (run_batch): its DataFrames, results and executor errors."""
