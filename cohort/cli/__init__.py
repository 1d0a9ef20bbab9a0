"""The `cohort` command line (click): operate groups and run the embedded broker.

`cohort.cli.main` holds the commands, `cohort.cli.ops` what they compute (plain values, tested without a
terminal), `cohort.cli.tables` how they print.
"""
