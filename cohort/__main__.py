"""`python -m cohort` is the `cohort` command."""

from cohort.cli.main import main

if __name__ == "__main__":
    main()
