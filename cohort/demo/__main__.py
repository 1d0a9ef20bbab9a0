"""`python -m cohort.demo` runs the demo story (`make demo`)."""

from cohort.demo.story import main

if __name__ == "__main__":
    raise SystemExit(main())
